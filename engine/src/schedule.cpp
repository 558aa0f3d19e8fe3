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
// from stage p − 1 to stage 0, chunk + 1), gradients the reverse. There are no tags (NCCL
// has none): the k-th message from one stage to another is the k-th receive the other
// posts from it, and the order below makes those agree. Each message carries a check value
// 2·(c·m + j) (+1 for gradients), c the sender's chunk, j the micro-batch, which strict
// mode (PTD_COMM_STRICT_FIFO=1) compares on every receive. Sends leave from a
// per-(chunk, micro-batch) buffer.
//
// Groups, as Megatron posts them (p2p_communication.py): with v = 1 an action's receive is
// posted in one group with the sends of the action before it (send_forward_recv_backward,
// send_backward_recv_forward), so a stage's send and its neighbour's send towards it are
// matched together instead of each waiting for the other's receive. With v > 1 a
// steady-state forward/backward pair is one unit: its two receives share a group with the
// previous unit's sends (send_forward_backward_recv_forward_backward); per action is not
// enough there (see pipeline_units). The communicator completes a group only when all its
// operations did (a send only once its receive was posted): NCCL's worst case.
//
// Why the order of actions cannot deadlock with asynchronous sends: only receives block,
// so a deadlock needs a cycle of receives
// each waiting on an op its peer has not reached yet. The (chunk, micro-batch) of the k-th
// forward (backward) is the same on every stage, so stage i's k-th forward waits only on
// stage i − 1's k-th forward (stage 0's: on stage p − 1's (k − p)-th), and the k-th
// backward only on stage i + 1's k-th backward (stage p − 1's: on stage 0's (k − p)-th).
// Stage i − 1 runs two more warm-up forwards than stage i (one hop down, one hop back), so
// before its k-th forward it has waited only on backwards < k − w(i) − 2 of stage i, all of
// which stage i ran before reaching its own k-th forward; symmetrically for backwards, and
// the (v − 1)·p extra warm-ups of every stage cover the wrap-around from stage p − 1 to
// stage 0 (p forwards earlier). So every receive's send is issued by a peer that waits only
// on ops that come earlier, and the wait graph is acyclic. Blocking groups make sends wait
// too, and the argument does not carry over by itself: test_engine_train's PipelinePlan
// tests simulate NCCL's group semantics over pipeline_plan for p ≤ 8, v ≤ 4, m ≤ 4p (every
// group completes, and the k-th send of every direction carries the check value its k-th
// receive expects), and the strict ctest entry runs the real thing for p = 2.
#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "ptd/engine/failure.h"
#include "ptd/engine/trainer.h"
#include "timing.h"

namespace ptd::engine {

namespace {

uint32_t check_value(int m, int sender_chunk, int j, int dir) { return (uint32_t)(2 * (sender_chunk * m + j) + dir); }

// What action `a` of stage i receives before it runs and sends after it (peer −1: nothing).
struct ActionMessages {
    PipelineP2p recv, send;
};

ActionMessages action_messages(int p, int i, int v, int m, const PipelineAction& a) {
    ActionMessages out;
    const bool embedding = i == 0 && a.chunk == 0, head = i == p - 1 && a.chunk == v - 1;
    const int c = a.chunk, j = a.micro_batch;
    if (a.forward) {
        if (!embedding) {
            const bool wrap = i == 0;  // from the last stage's previous chunk
            out.recv = {false, wrap ? p - 1 : i - 1, check_value(m, wrap ? c - 1 : c, j, 0), a};
        }
        if (!head) out.send = {true, i == p - 1 ? 0 : i + 1, check_value(m, c, j, 0), a};
    } else {
        if (!head) {
            const bool wrap = i == p - 1;  // from the first stage's next chunk
            out.recv = {false, wrap ? 0 : i + 1, check_value(m, wrap ? c + 1 : c, j, 1), a};
        }
        if (!embedding) out.send = {true, i == 0 ? p - 1 : i - 1, check_value(m, c, j, 1), a};
    }
    return out;
}

}  // namespace

namespace {

// The step's actions in units that share one p2p group before them: every action alone
// for 1F1B; for interleaved 1F1B the steady state's forward/backward pairs are one unit
// (Megatron's send_forward_backward_recv_forward_backward). Interleaving needs the pair:
// a chunk's gradient sent from stage i may be received by its neighbour only after that
// neighbour's next send towards stage i completes, which needs stage i's next backward
// receive posted — in the same group as the gradient's send.
std::vector<std::vector<PipelineAction>> pipeline_units(int p, int i, int v, int m) {
    std::vector<std::vector<PipelineAction>> out;
    if (v == 1) {
        const int warmup = std::min(p - i - 1, m);
        for (int j = 0; j < warmup; ++j) out.push_back({{true, 0, j}});
        for (int k = 0; k < m - warmup; ++k) {
            out.push_back({{true, 0, warmup + k}});
            out.push_back({{false, 0, k}});
        }
        for (int k = m - warmup; k < m; ++k) out.push_back({{false, 0, k}});
        return out;
    }
    const int total = m * v;
    auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
    auto fchunk = [&](int k) { return (k / p) % v; };
    auto bchunk = [&](int k) { return v - 1 - (k / p) % v; };
    const int warmup = std::min(2 * (p - i - 1) + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) out.push_back({{true, fchunk(k), micro(k)}});
    for (int k = 0; k < total - warmup; ++k)
        out.push_back({{true, fchunk(warmup + k), micro(warmup + k)}, {false, bchunk(k), micro(k)}});
    for (int k = total - warmup; k < total; ++k) out.push_back({{false, bchunk(k), micro(k)}});
    return out;
}

}  // namespace

std::vector<PipelineAction> pipeline_actions(int p, int i, int v, int m) {
    std::vector<PipelineAction> out;
    for (const auto& unit : pipeline_units(p, i, v, m)) out.insert(out.end(), unit.begin(), unit.end());
    return out;
}

std::vector<PipelinePlanEntry> pipeline_plan(int p, int i, int v, int m) {
    std::vector<PipelinePlanEntry> plan;
    std::vector<PipelineP2p> pending;  // sends of the previous unit
    for (const auto& unit : pipeline_units(p, i, v, m)) {
        PipelinePlanEntry e;
        e.group = std::move(pending);
        pending.clear();
        e.actions = unit;
        for (const PipelineAction& a : unit) {
            const ActionMessages msg = action_messages(p, i, v, m, a);
            if (msg.recv.peer >= 0) e.group.push_back(msg.recv);
            if (msg.send.peer >= 0) pending.push_back(msg.send);
        }
        plan.push_back(std::move(e));
    }
    if (!pending.empty()) plan.push_back({std::move(pending), {}});
    return plan;
}

namespace {

struct PipelineRun {
    Model& model;
    Activations& acts;
    CommGroups& groups;
    const StepBatch& batch;
    StepTimes& times;
    StageComm comm;
    double* loss_acc = nullptr;        // device scalar the head adds its loss to
    int staged = -1;                   // the micro-batch whose ids are in acts.tokens_staging
    std::deque<int> free_slots;        // FIFO: with v = 1 micro-batch j gets slot j % slots
    std::vector<int> slot_of;          // [c·m + j]

    const EngineConfig& cfg() const { return model.cfg; }
    int idx(int c, int j) const { return c * cfg().grad_accum + j; }
    bool has_embedding(int c) const { return cfg().first && c == 0; }
    bool has_head(int c) const { return cfg().last && c == cfg().vpp - 1; }
    int64_t message_elements() const { return cfg().rows_local() * cfg().model.hidden; }

    // Token ids of micro-batch j: one upload of its b·(s+1) ids from the backend's host
    // staging buffer, once per micro-batch on this rank (the first stage's forward, or the
    // last stage's head, whichever comes first); inputs (positions 0..s−1) and targets
    // (1..s) are cut from it on the device.
    const int32_t* stage_tokens(int j) {
        const int64_t n = cfg().micro_batch * (int64_t)(cfg().seq + 1);
        if (staged != j) {
            model.be->upload(acts.tokens_staging, batch.tokens + (int64_t)j * n, (size_t)n * sizeof(int32_t));
            staged = j;
        }
        return acts.tokens_staging;
    }
    void split_tokens(int j, int32_t* inputs, int32_t* targets) {
        model.be->split_tokens(inputs, targets, stage_tokens(j), cfg().micro_batch, cfg().seq);
    }

    // The output head of micro-batch j: loss, and the gradient of its input into `d`.
    void head(int j, void* d) {
        const EngineConfig& c = cfg();
        split_tokens(j, nullptr, acts.out.targets);
        // Mean over every token of the global batch: 1 / (b · s · m · dp); the DP sum
        // of gradients then needs no further scaling.
        // The fp16 loss scale multiplies it too (unscaled again in AdamW's grad scale).
        const float scale = (float)((double)batch.loss_scale / ((double)c.rows() * c.grad_accum * c.dp));
        output_forward_backward(model, acts, scale, d, c.tp_rank == 0 ? loss_acc : nullptr, comm);
    }

    // Takes an activation slot for a forward (before its receive: the slot's first layer
    // input is the receive target).
    void begin_forward(int ch, int j) {
        const EngineConfig& c = cfg();
        if (free_slots.empty())
            fatal_run_error("internal error: the activation pool (" + std::to_string(c.slots) +
                            " slots) ran dry at the forward of chunk " + std::to_string(ch) + ", micro-batch " +
                            std::to_string(j));
        const int slot = free_slots.front();
        free_slots.pop_front();
        slot_of[(size_t)idx(ch, j)] = slot;
    }

    void* forward_input(int ch, int j) {
        std::vector<LayerActs>& layers = acts.slot_layers[(size_t)slot_of[(size_t)idx(ch, j)]];
        return cfg().chunk_layers[(size_t)ch] == 0 ? acts.out.lnf_in : layers[0].ln1_in;
    }

    void* send_buffer(const PipelineAction& a) {
        return a.forward ? acts.send_fwd[(size_t)idx(a.chunk, a.micro_batch)]
                         : acts.send_bwd[(size_t)idx(a.chunk, a.micro_batch)];
    }

    // Posts one plan group on the pp communicator and waits for all of it.
    void exchange(const PipelinePlanEntry& e) {
        if (e.group.empty()) return;
        const int64_t n = message_elements();
        const auto t0 = clock_type::now();
        Communicator& pp = *groups.pp;
        CommOnStream on_comm(*model.be, model.comm_ready, model.comm_done);
        pp.group_start();
        for (const PipelineP2p& op : e.group) {
            if (op.send) pp.send(send_buffer(op.of), n, cfg().act, op.peer, op.check);
            else pp.recv(op.of.forward ? forward_input(op.of.chunk, op.of.micro_batch) : acts.d_stream, n, cfg().act,
                         op.peer, op.check);
        }
        pp.group_end();
        // A group with a receive waits for the neighbour's compute; one of sends only
        // for its receive to be posted.
        bool receives = false;
        for (const PipelineP2p& op : e.group) receives |= !op.send;
        (receives ? times.pipeline_idle : times.pp_comm) += since(t0);
        if (times.timeline) {
            // One block per group: a receive if it holds one (named by its first receive),
            // else a send (named by its first send).
            const PipelineP2p* named = &e.group.front();
            for (const PipelineP2p& op : e.group)
                if (!op.send) {
                    named = &op;
                    break;
                }
            times.timeline->add(receives ? BlockKind::recv : BlockKind::send, named->of.micro_batch, named->of.chunk,
                                kStreamComm, t0);
        }
    }

    void forward(int ch, int j) {
        const EngineConfig& c = cfg();
        const int slot = slot_of[(size_t)idx(ch, j)];
        std::vector<LayerActs>& layers = acts.slot_layers[(size_t)slot];
        const int nl = c.chunk_layers[(size_t)ch], l0 = c.chunk_first(ch);
        void* stage_in = forward_input(ch, j);
        if (has_embedding(ch)) {
            split_tokens(j, acts.slot_tokens[(size_t)slot], nullptr);
            embedding_forward(model, acts, acts.slot_tokens[(size_t)slot], stage_in, comm);
        }
        void* send = has_head(ch) ? nullptr : send_buffer({true, ch, j});
        for (int li = 0; li < nl; ++li) {
            void* out = li + 1 < nl     ? layers[(size_t)li + 1].ln1_in
                         : has_head(ch) ? acts.out.lnf_in
                                        : send;
            layer_forward(model, acts, l0 + li, layers[(size_t)li], out, comm);
        }
        // Interleaved: this chunk's backward may come later, while the head's buffers
        // exist once; so the head runs now and its input gradient waits in d_head.
        if (has_head(ch) && c.vpp > 1) head(j, acts.d_head[(size_t)j]);
    }

    void backward(int ch, int j) {
        const EngineConfig& c = cfg();
        const int slot = slot_of[(size_t)idx(ch, j)];
        std::vector<LayerActs>& layers = acts.slot_layers[(size_t)slot];
        const int nl = c.chunk_layers[(size_t)ch], l0 = c.chunk_first(ch);
        void* d = acts.d_stream;  // the receive target, unless this chunk holds the head
        if (has_head(ch)) {
            if (c.vpp > 1) d = acts.d_head[(size_t)j];
            else head(j, d);
        }
        for (int li = nl - 1; li >= 0; --li) {
            LayerActs& la = layers[(size_t)li];
            // Full recompute: rebuild this layer's saved tensors from its kept input first.
            if (c.recompute_full) {
                const auto t0 = clock_type::now();
                layer_forward(model, acts, l0 + li, la, acts.w_dres, comm);
                // Recorded as its own block, nested in the backward block that holds it.
                if (times.timeline) times.timeline->add(BlockKind::recompute, j, ch, kStreamCompute, t0);
            }
            layer_backward(model, acts, l0 + li, la, d, d, comm);
        }
        if (has_embedding(ch)) embedding_backward(model, acts, acts.slot_tokens[(size_t)slot], d, comm);
        else model.be->copy(send_buffer({false, ch, j}), d, c.act, message_elements());
        free_slots.push_back(slot);
    }
};

}  // namespace

void run_pipeline_step(Model& model, Activations& acts, CommGroups& groups, const StepBatch& batch,
                       double* loss_acc, StepTimes& times, bool cuda_graphs) {
    const EngineConfig& c = model.cfg;
    PipelineRun run{model, acts, groups, batch, times, StageComm{groups.tp.get(), &times.tp_comm}, loss_acc, -1, {}, {}};
    for (int s = 0; s < c.slots; ++s) run.free_slots.push_back(s);
    run.slot_of.assign((size_t)(c.grad_accum * c.vpp), -1);
    if (cuda_graphs) {
        // One stage, one chunk (trainer.cpp refuses the rest): a micro-batch is its forward
        // then its backward, with no communication between. Its token ids are uploaded
        // before the graph (the staging buffer's address is the same for every micro-batch,
        // the host source is not); then micro-batch 0 is captured, and the graph runs for
        // every micro-batch. Where the backend checks by recapture (the simulator), each
        // later micro-batch is captured again and compared with the graph first.
        Backend& be = *model.be;
        for (int j = 0; j < c.grad_accum; ++j) {
            run.begin_forward(0, j);
            if (j > 0 && run.slot_of[(size_t)j] != run.slot_of[0])
                fatal_run_error("PTD_CUDA_GRAPHS=1: micro-batch " + std::to_string(j) + " uses activation slot " +
                                std::to_string(run.slot_of[(size_t)j]) + ", micro-batch 0 slot " +
                                std::to_string(run.slot_of[0]) +
                                ": the graph captured for micro-batch 0 would read and write the wrong buffers");
            run.stage_tokens(j);
            run.comm.timeline = times.timeline;
            run.comm.micro_batch = j;
            run.comm.chunk = 0;
            const auto t0 = clock_type::now();
            if (j == 0 || be.graph_recapture_checks()) {
                be.graph_begin();
                run.forward(0, j);
                run.backward(0, j);  // gives the slot back
                be.graph_end();
            } else {
                run.free_slots.push_back(run.slot_of[(size_t)j]);
            }
            be.graph_replay();
            if (times.inject_compute_delay_s > 0)
                std::this_thread::sleep_for(std::chrono::duration<double>(times.inject_compute_delay_s));
            // one block per micro-batch: its forward and backward are one graph launch
            if (times.timeline) times.timeline->add(BlockKind::forward, j, 0, kStreamCompute, t0);
        }
        be.graph_release();
        return;
    }
    for (const PipelinePlanEntry& e : pipeline_plan(c.pp, c.pp_rank, c.vpp, c.grad_accum)) {
        for (const PipelineAction& a : e.actions)
            if (a.forward) run.begin_forward(a.chunk, a.micro_batch);
        run.exchange(e);
        for (const PipelineAction& a : e.actions) {
            run.comm.timeline = times.timeline;
            run.comm.micro_batch = a.micro_batch;
            run.comm.chunk = a.chunk;
            const auto t0 = clock_type::now();
            if (a.forward) run.forward(a.chunk, a.micro_batch);
            else run.backward(a.chunk, a.micro_batch);
            if (times.inject_compute_delay_s > 0)
                std::this_thread::sleep_for(std::chrono::duration<double>(times.inject_compute_delay_s));
            if (times.timeline)
                times.timeline->add(a.forward ? BlockKind::forward : BlockKind::backward, a.micro_batch, a.chunk,
                                    kStreamCompute, t0);
        }
    }
}

}  // namespace ptd::engine
