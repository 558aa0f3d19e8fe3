// stream_check.cpp — a debug backend that checks the stream/event contract of ptd-engine
// on CPU, where both streams run synchronously and a missing event can never show up as a
// race. It forwards every call to the real backend and keeps logical clocks: each compute
// op stamps the allocation it writes with the compute stream's position; record_event
// remembers a stream's position; wait_event makes it visible to the waiting stream. When
// the communicator is about to read memory (Communicator::set_access_observer →
// note_comm_access) whose last compute write the comm stream has not waited for, or when a
// compute op uses memory the communicator wrote before the compute stream waited for the
// comm stream's event, it stops the process naming the buffer, the op that wrote it and
// the op that used it — the bugs a GPU would show as a collective sending stale data, or a
// kernel reading a receive still in flight.
#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "ptd/engine/backend.h"
#include "ptd/engine/contract_failure.h"

namespace ptd::engine {

namespace {

class stream_checking_backend final : public Backend {
public:
    explicit stream_checking_backend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}

    const char* name() const override { return in_->name(); }
    bool set_compute_threads(int threads) override { return in_->set_compute_threads(threads); }

    // ---- streams and events ------------------------------------------------------------
    Event create_event(const char* what) override {
        Event e = in_->create_event(what);
        if ((size_t)e.id >= events_.size()) events_.resize((size_t)e.id + 1);
        events_[(size_t)e.id] = {what ? what : "?", -1, Stream::compute};
        return e;
    }
    void record_event(Event e, Stream s) override {
        in_->record_event(e, s);
        EventState& st = event(e);
        st.stream = s;
        st.position = s == Stream::compute ? compute_pos_ : comm_pos_;
    }
    void wait_event(Stream s, Event e) override {
        in_->wait_event(s, e);
        const EventState& st = event(e);
        if (st.position < 0) fail("wait for event \"%s\" that was never recorded", st.what);
        if (s == Stream::comm && st.stream == Stream::compute) comm_sees_compute_ = std::max(comm_sees_compute_, st.position);
        if (s == Stream::compute && st.stream == Stream::comm) compute_sees_comm_ = std::max(compute_sees_comm_, st.position);
    }
    void note_comm_access(const void* x, size_t bytes, bool write, const char* op) override {
        ++comm_pos_;
        Block* b = find(x);
        if (!b) return;
        if (write) {
            b->comm_written_at = comm_pos_;
            b->comm_written_by = op;
            return;
        }
        if (b->written_at <= comm_sees_compute_) return;
        fail("the comm stream's %s reads %zu bytes of \"%s\", written by compute op #%lld (%s), but the comm stream "
             "waited only for compute work up to op #%lld: record an event on the compute stream after the write and "
             "wait for it on the comm stream before the collective (CommOnStream)",
             op, bytes, b->what, (long long)b->written_at, b->written_by, (long long)comm_sees_compute_);
    }

    // ---- memory ------------------------------------------------------------------------
    void* alloc(MemCategory cat, size_t bytes, const char* what) override {
        void* p = in_->alloc(cat, bytes, what);
        blocks_[(uintptr_t)p] = Block{bytes, what ? what : "?", 0, "allocation"};
        return p;
    }
    void release(void* p) override {
        blocks_.erase((uintptr_t)p);
        in_->release(p);
    }
    MemStats mem_stats() const override { return in_->mem_stats(); }
    void seal_allocations(bool sealed) override { in_->seal_allocations(sealed); }
    void reset_peaks() override { in_->reset_peaks(); }
    void upload(void* dst, const void* src_host, size_t bytes) override {
        rd(dst, "upload"), wrote(dst, "upload");
        in_->upload(dst, src_host, bytes);
    }
    void download(void* dst_host, const void* src, size_t bytes) override {
        rd(src, "download");
        in_->download(dst_host, src, bytes);
    }
    TransferStats transfer_stats() const override { return in_->transfer_stats(); }
    bool graphs() const override { return in_->graphs(); }
    bool graph_recapture_checks() const override { return in_->graph_recapture_checks(); }
    void graph_begin() override { in_->graph_begin(); }
    void graph_end() override { in_->graph_end(); }
    void graph_replay() override { in_->graph_replay(); }
    void graph_release() override { in_->graph_release(); }
    void* alloc_host(size_t bytes, const char* what) override { return in_->alloc_host(bytes, what); }
    void release_host(void* p) override { in_->release_host(p); }
    void zero(void* x, size_t bytes) override {
        rd(x, "zero"), wrote(x, "zero");
        in_->zero(x, bytes);
    }

    // ---- compute ops: check every operand (rd), stamp every output (wrote), then forward -------
    // Reads are listed first, the outputs last; an in/out operand is both.
    void fill(void* x, DType t, float value, int64_t n) override {
        rd(x, "fill");
        wrote(x, "fill"), in_->fill(x, t, value, n);
    }
    void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n) override {
        rd(dst, "convert"), rd(src, "convert");
        wrote(dst, "convert"), in_->convert(dst, dst_t, src, src_t, n);
    }
    void add(void* y, const void* x, DType t, int64_t n) override {
        rd(y, "add"), rd(x, "add");
        wrote(y, "add"), in_->add(y, x, t, n);
    }
    void scale(float* x, float a, int64_t n) override {
        rd(x, "scale");
        wrote(x, "scale"), in_->scale(x, a, n);
    }
    void sum_squares(double* acc, const float* x, int64_t n) override {
        rd(acc, "sum_squares"), rd(x, "sum_squares");
        wrote(acc, "sum_squares"), in_->sum_squares(acc, x, n);
    }
    void sum_into(double* acc, const float* x, int64_t n) override {
        rd(acc, "sum_into"), rd(x, "sum_into");
        wrote(acc, "sum_into"), in_->sum_into(acc, x, n);
    }
    void finish_step_scalars(double* s, double max_norm, double loss_scale) override {
        rd(s, "finish_step_scalars");
        wrote(s, "finish_step_scalars"), in_->finish_step_scalars(s, max_norm, loss_scale);
    }
    void split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T) override {
        rd(inputs, "split_tokens"), rd(targets, "split_tokens"), rd(seq, "split_tokens");
        wrote(inputs, "split_tokens"), wrote(targets, "split_tokens");
        in_->split_tokens(inputs, targets, seq, B, T);
    }
    void gemm(const Gemm& g) override {
        rd(g.A, "gemm"), rd(g.B, "gemm"), rd(g.C, "gemm"), rd(g.c_in, "gemm"), rd(g.bias, "gemm");
        rd(g.aux, "gemm"), rd(g.bias_grad, "gemm");
        if (g.epilogue == Gemm::Epilogue::gelu_aux) wrote(g.aux, "gemm");
        if (g.epilogue == Gemm::Epilogue::bias_grad) wrote(g.bias_grad, "gemm");
        wrote(g.C, "gemm"), in_->gemm(g);
    }
    void add_norm_forward(DType t, void* res_out, void* out, float* mean, float* rstd, const void* x,
                          const void* residual, const void* w, const void* b, int64_t rows, int64_t C, float eps,
                          NormKind kind) override {
        const char* op = "add_norm_forward";
        rd(res_out, op), rd(out, op), rd(mean, op), rd(rstd, op), rd(x, op), rd(residual, op), rd(w, op), rd(b, op);
        wrote(res_out, op), wrote(out, op), wrote(mean, op), wrote(rstd, op);
        in_->add_norm_forward(t, res_out, out, mean, rstd, x, residual, w, b, rows, C, eps, kind);
    }
    void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) override {
        rd(y, "bias_add"), rd(bias, "bias_add");
        wrote(y, "bias_add"), in_->bias_add(y, bias, t, rows, cols);
    }
    void bias_residual_add(void* out, const void* x, const void* bias, const void* residual, DType t, int64_t rows,
                           int64_t cols) override {
        const char* op = "bias_residual_add";
        rd(out, op), rd(x, op), rd(bias, op), rd(residual, op);
        wrote(out, op), in_->bias_residual_add(out, x, bias, residual, t, rows, cols);
    }
    void bias_grad(float* dbias, const void* dy, DType t, int64_t rows, int64_t cols) override {
        rd(dbias, "bias_grad"), rd(dy, "bias_grad");
        wrote(dbias, "bias_grad"), in_->bias_grad(dbias, dy, t, rows, cols);
    }
    void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                           int64_t rows, int64_t C, float eps) override {
        const char* op = "layernorm_forward";
        rd(out, op), rd(mean, op), rd(rstd, op), rd(x, op), rd(w, op), rd(b, op);
        wrote(out, op), wrote(mean, op), wrote(rstd, op);
        in_->layernorm_forward(t, out, mean, rstd, x, w, b, rows, C, eps);
    }
    void layernorm_backward(DType t, void* dx, float* dw, float* db, const void* dout, const void* x, const float* mean,
                            const float* rstd, const void* w, int64_t rows, int64_t C, bool accumulate_dx) override {
        const char* op = "layernorm_backward";
        rd(dx, op), rd(dw, op), rd(db, op), rd(dout, op), rd(x, op), rd(mean, op), rd(rstd, op), rd(w, op);
        wrote(dx, op), wrote(dw, op), wrote(db, op);
        in_->layernorm_backward(t, dx, dw, db, dout, x, mean, rstd, w, rows, C, accumulate_dx);
    }
    void rmsnorm_forward(DType t, void* out, float* rstd, const void* x, const void* w, int64_t rows, int64_t C,
                         float eps) override {
        const char* op = "rmsnorm_forward";
        rd(out, op), rd(rstd, op), rd(x, op), rd(w, op);
        wrote(out, op), wrote(rstd, op);
        in_->rmsnorm_forward(t, out, rstd, x, w, rows, C, eps);
    }
    void rmsnorm_backward(DType t, void* dx, float* dw, const void* dout, const void* x, const float* rstd,
                          const void* w, int64_t rows, int64_t C, bool accumulate_dx) override {
        const char* op = "rmsnorm_backward";
        rd(dx, op), rd(dw, op), rd(dout, op), rd(x, op), rd(rstd, op), rd(w, op);
        wrote(dx, op), wrote(dw, op);
        in_->rmsnorm_backward(t, dx, dw, dout, x, rstd, w, rows, C, accumulate_dx);
    }
    void gelu_forward(DType t, void* out, const void* x, int64_t n) override {
        rd(out, "gelu_forward"), rd(x, "gelu_forward");
        wrote(out, "gelu_forward"), in_->gelu_forward(t, out, x, n);
    }
    void gelu_backward(DType t, void* dx, const void* x, const void* dout, int64_t n) override {
        rd(dx, "gelu_backward"), rd(x, "gelu_backward"), rd(dout, "gelu_backward");
        wrote(dx, "gelu_backward"), in_->gelu_backward(t, dx, x, dout, n);
    }
    void swiglu_forward(DType t, void* out, const void* gate, const void* up, int64_t n) override {
        rd(out, "swiglu_forward"), rd(gate, "swiglu_forward"), rd(up, "swiglu_forward");
        wrote(out, "swiglu_forward"), in_->swiglu_forward(t, out, gate, up, n);
    }
    void swiglu_backward(DType t, void* dgate, void* dup, const void* dout, const void* gate, const void* up,
                         int64_t n) override {
        const char* op = "swiglu_backward";
        rd(dgate, op), rd(dup, op), rd(dout, op), rd(gate, op), rd(up, op);
        wrote(dgate, op), wrote(dup, op);
        in_->swiglu_backward(t, dgate, dup, dout, gate, up, n);
    }
    void rope_table(float* table, int64_t positions, int64_t D, float theta) override {
        rd(table, "rope_table");
        wrote(table, "rope_table"), in_->rope_table(table, positions, D, theta);
    }
    void rope_forward(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                      const float* table, int64_t positions) override {
        rd(x, "rope_forward"), rd(table, "rope_forward");
        wrote(x, "rope_forward"), in_->rope_forward(t, x, ld, B, T, nh, D, pos0, table, positions);
    }
    void rope_backward(DType t, void* dx, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                       const float* table, int64_t positions) override {
        rd(dx, "rope_backward"), rd(table, "rope_backward");
        wrote(dx, "rope_backward"), in_->rope_backward(t, dx, ld, B, T, nh, D, pos0, table, positions);
    }
    void attention_forward(DType t, void* ctx, void* probs, const void* qkv, int64_t B, int64_t T, int64_t H,
                           int64_t G, int64_t D, void* workspace) override {
        const char* op = "attention_forward";
        rd(ctx, op), rd(probs, op), rd(qkv, op), rd(workspace, op);
        wrote(ctx, op), wrote(probs, op), wrote(workspace, op);
        in_->attention_forward(t, ctx, probs, qkv, B, T, H, G, D, workspace);
    }
    void attention_backward(DType t, void* dqkv, const void* dctx, const void* probs, const void* qkv, int64_t B,
                            int64_t T, int64_t H, int64_t G, int64_t D, void* workspace) override {
        const char* op = "attention_backward";
        rd(dqkv, op), rd(dctx, op), rd(probs, op), rd(qkv, op), rd(workspace, op);
        wrote(dqkv, op), wrote(workspace, op);
        in_->attention_backward(t, dqkv, dctx, probs, qkv, B, T, H, G, D, workspace);
    }
    int64_t attention_backward_workspace(DType t, int64_t B, int64_t T, int64_t H, int64_t G,
                                         int64_t D) const override {
        return in_->attention_backward_workspace(t, B, T, H, G, D);
    }
    void flash_attention_forward(DType t, void* ctx, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                                 int64_t G, int64_t D) override {
        const char* op = "flash_attention_forward";
        rd(ctx, op), rd(lse, op), rd(qkv, op);
        wrote(ctx, op), wrote(lse, op);
        in_->flash_attention_forward(t, ctx, lse, qkv, B, T, H, G, D);
    }
    void flash_attention_backward(DType t, void* dqkv, const void* dctx, const void* ctx, const float* lse,
                                  const void* qkv, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                                  void* workspace) override {
        const char* op = "flash_attention_backward";
        rd(dqkv, op), rd(dctx, op), rd(ctx, op), rd(lse, op), rd(qkv, op), rd(workspace, op);
        wrote(dqkv, op), wrote(workspace, op);
        in_->flash_attention_backward(t, dqkv, dctx, ctx, lse, qkv, B, T, H, G, D, workspace);
    }
    int64_t flash_attention_backward_workspace(DType t, int64_t B, int64_t T, int64_t H, int64_t G,
                                               int64_t D) const override {
        return in_->flash_attention_backward_workspace(t, B, T, H, G, D);
    }
    void* native_stream(Stream s) const override { return in_->native_stream(s); }
    bool device_mem_info(int64_t* free_bytes, int64_t* total_bytes) const override {
        return in_->device_mem_info(free_bytes, total_bytes);
    }
    int64_t operand_scratch_bytes(DType t, int64_t largest_operand, int64_t widest_row) const override {
        return in_->operand_scratch_bytes(t, largest_operand, widest_row);
    }
    // The scratch is the inner backend's own, private to its ops: no stream can reach it.
    void plan_embedding_backward(int64_t rows, int64_t Vl) override { in_->plan_embedding_backward(rows, Vl); }
    void plan_operand_scratch(DType t, int64_t largest_operand, int64_t widest_row) override {
        in_->plan_operand_scratch(t, largest_operand, widest_row);
    }
    void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte, int64_t v0, int64_t Vl,
                           int64_t rows, int64_t C) override {
        rd(out, "embedding_forward"), rd(tokens, "embedding_forward"), rd(wte, "embedding_forward");
        wrote(out, "embedding_forward"), in_->embedding_forward(t, out, tokens, wte, v0, Vl, rows, C);
    }
    void embedding_backward(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                            int64_t rows, int64_t C) override {
        rd(dwte, "embedding_backward"), rd(dout, "embedding_backward"), rd(tokens, "embedding_backward");
        wrote(dwte, "embedding_backward"), in_->embedding_backward(t, dwte, dout, tokens, v0, Vl, rows, C);
    }
    void position_forward(DType t, void* out, const void* wpe, int64_t row0, int64_t rows, int64_t T,
                          int64_t C) override {
        rd(out, "position_forward"), rd(wpe, "position_forward");
        wrote(out, "position_forward"), in_->position_forward(t, out, wpe, row0, rows, T, C);
    }
    void position_backward(DType t, float* dwpe, const void* dout, int64_t row0, int64_t rows, int64_t T,
                           int64_t C) override {
        rd(dwpe, "position_backward"), rd(dout, "position_backward");
        wrote(dwpe, "position_backward"), in_->position_backward(t, dwpe, dout, row0, rows, T, C);
    }
    void xent_row_max(float* rowmax, const float* logits, int64_t rows, int64_t Vl, int64_t v0,
                      int64_t V_valid) override {
        rd(rowmax, "xent_row_max"), rd(logits, "xent_row_max");
        wrote(rowmax, "xent_row_max"), in_->xent_row_max(rowmax, logits, rows, Vl, v0, V_valid);
    }
    void xent_sums(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                   const int32_t* targets, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        const char* op = "xent_sums";
        rd(sumexp, op), rd(target_logit, op), rd(logits, op), rd(rowmax, op), rd(targets, op);
        wrote(sumexp, op), wrote(target_logit, op);
        in_->xent_sums(sumexp, target_logit, logits, rowmax, targets, rows, Vl, v0, V_valid);
    }
    void xent_finish(float* loss, float* logits, const float* rowmax, const float* sumexp, const float* target_logit,
                     int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        const char* op = "xent_finish";
        rd(loss, op), rd(logits, op), rd(rowmax, op), rd(sumexp, op), rd(target_logit, op);
        wrote(loss, op), wrote(logits, op);
        in_->xent_finish(loss, logits, rowmax, sumexp, target_logit, rows, Vl, v0, V_valid);
    }
    void xent_backward(void* dlogits, DType dlogits_t, const float* probs, const int32_t* targets, float scale,
                       int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        rd(dlogits, "xent_backward"), rd(probs, "xent_backward"), rd(targets, "xent_backward");
        wrote(dlogits, "xent_backward"),
            in_->xent_backward(dlogits, dlogits_t, probs, targets, scale, rows, Vl, v0, V_valid);
    }
    void xent_fused(float* loss, void* dlogits, DType dlogits_t, const float* logits, const int32_t* targets,
                    float scale, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        const char* op = "xent_fused";
        rd(loss, op), rd(dlogits, op), rd(logits, op), rd(targets, op);
        wrote(loss, op), wrote(dlogits, op);
        in_->xent_fused(loss, dlogits, dlogits_t, logits, targets, scale, rows, Vl, v0, V_valid);
    }
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, const double* scalars, int64_t step, void* model_p, DType model_t) override {
        rd(p, "adamw"), rd(g, "adamw"), rd(m, "adamw"), rd(v, "adamw"), rd(scalars, "adamw"), rd(model_p, "adamw");
        wrote(p, "adamw"), wrote(m, "adamw"), wrote(v, "adamw"), wrote(model_p, "adamw");
        in_->adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, scalars, step, model_p, model_t);
    }
    int64_t adamw_plan_bytes(int count) const override { return in_->adamw_plan_bytes(count); }
    // The checker keeps its own copy of the ranges: a step reads and writes every one.
    void plan_adamw(const AdamWRange* ranges, int count) override {
        in_->plan_adamw(ranges, count);
        adamw_ranges_.assign(ranges, ranges + count);
    }
    void adamw_step(float lr, float beta1, float beta2, float eps, const double* scalars, int64_t step,
                    DType model_t) override {
        const char* op = "adamw_step";
        rd(scalars, op);
        for (const AdamWRange& r : adamw_ranges_) rd(r.p, op), rd(r.g, op), rd(r.m, op), rd(r.v, op), rd(r.model_p, op);
        for (const AdamWRange& r : adamw_ranges_) wrote(r.p, op), wrote(r.m, op), wrote(r.v, op), wrote(r.model_p, op);
        in_->adamw_step(lr, beta1, beta2, eps, scalars, step, model_t);
    }

private:
    struct Block {
        size_t bytes = 0;
        const char* what = "?";
        int64_t written_at = 0;        // compute op that last wrote it (0: none)
        const char* written_by = "";
        int64_t comm_written_at = 0;   // comm operation that last wrote it (0: none)
        const char* comm_written_by = "";
    };
    struct EventState {
        const char* what = "?";
        int64_t position = -1;         // the recording stream's position; −1: never recorded
        Stream stream = Stream::compute;
    };

    [[noreturn]] [[gnu::format(printf, 2, 3)]] void fail(const char* fmt, ...) const {
        va_list ap;
        va_start(ap, fmt);
        contract_failure("stream check: ", fmt, ap);
    }
    EventState& event(Event e) {
        if (e.id < 0 || (size_t)e.id >= events_.size()) fail("unknown event %d (create events at start-up)", e.id);
        return events_[(size_t)e.id];
    }
    Block* find(const void* x) {
        auto it = blocks_.upper_bound((uintptr_t)x);
        if (it == blocks_.begin()) return nullptr;
        --it;
        const uintptr_t p = (uintptr_t)x;
        return p < it->first + std::max<size_t>(it->second.bytes, 1) ? &it->second : nullptr;
    }
    // A compute op (or a copy on the compute stream) uses x: the comm operation that last
    // wrote it must be visible to the compute stream (an event recorded on comm after it,
    // waited for by compute), or the op would read — or overwrite — memory still in flight.
    void rd(const void* x, const char* op) {
        if (!x) return;
        const Block* b = find(x);
        if (!b || b->comm_written_at <= compute_sees_comm_) return;
        fail("compute op %s uses \"%s\", written by the comm stream's %s (comm operation #%lld), but the compute "
             "stream waited only for comm work up to #%lld: record an event on the comm stream after the collective and "
             "wait for it on the compute stream (CommOnStream)",
             op, b->what, b->comm_written_by, (long long)b->comm_written_at, (long long)compute_sees_comm_);
    }
    // A compute op writes x: it is the next op on the compute stream.
    void wrote(const void* x, const char* op) {
        if (!x) return;
        ++compute_pos_;
        if (Block* b = find(x)) {
            b->written_at = compute_pos_;
            b->written_by = op;
        }
    }

    std::unique_ptr<Backend> in_;
    std::map<uintptr_t, Block> blocks_;  // filled at start-up only (the allocator is sealed later)
    std::vector<EventState> events_;     // likewise
    std::vector<AdamWRange> adamw_ranges_;  // plan_adamw's list, for adamw_step's reads and writes
    int64_t compute_pos_ = 0, comm_pos_ = 0;
    int64_t comm_sees_compute_ = 0;      // compute ops the comm stream has waited for
    int64_t compute_sees_comm_ = 0;      // comm operations the compute stream has waited for
};

}  // namespace

std::unique_ptr<Backend> make_stream_checking_backend(std::unique_ptr<Backend> inner) {
    return std::make_unique<stream_checking_backend>(std::move(inner));
}

}  // namespace ptd::engine
