// probe.cpp — the calibration probes of one rank (probe.h). Every rank of the job runs
// them at once, as it would train: compute shares the cores and links the way a step does.
// Each probe is warmed up, then timed repeat by repeat; one "probe" metrics line carries
// its median and spread. The order of the communication probes is fixed by the job, so
// every member of a group reaches each collective together.
#include "ptd/engine/probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "ptd/engine/blas_core.h"
#include "ptd/engine/kv_store.h"
#include "ptd/engine/metrics.h"
#include "ptd/engine/model.h"
#include "ptd/spec/cluster_profile.h"
#include "device_select.h"
#include "timing.h"
#ifdef PTD_HAVE_CUDA
#include "cuda_devices.h"
#endif

namespace ptd::engine {

ProbePlan probe_plan(const ProbeOptions& o) {
    ProbePlan p;
    if (o.quick) {
        p.warmup = 1, p.repeats = 5, p.pass_span_s = 1.0;
        p.message_bytes = {4 << 10, 256 << 10, 4 << 20};
    } else {
        // 4 KiB … 16 MiB, ×4: the latency end and the bandwidth end of the t = α + β·bytes fit.
        for (int64_t b = 4 << 10; b <= (16 << 20); b *= 4) p.message_bytes.push_back(b);
    }
    return p;
}

namespace {

struct Prober {
    ConnectedRank& r;
    const JobSpec& job;
    ProbePlan plan;
    MetricsSource src;
    int probes = 0;
    // The dry pass (before the real one): nothing runs; each probe adds what the job's
    // GPU preset says it should take, so the launcher can print the expected total first.
    bool dry = false;
    double expected_s = 0;
    double predicted_s = 0;  // the next probe's preset time for one run, set before time_op

    Backend& be() { return *r.be; }
    const GpuSpec& gpu() const { return job.cluster.gpu; }
    double preset_seconds_for_flops(double flops) const {
        const double peak = gpu().peak_tflops(job.training.precision);
        return peak > 0 ? flops / (peak * 1e12) : 0;
    }
    double preset_seconds_for_bytes(double bytes, double gbps) const { return gbps > 0 ? bytes / (gbps * 1e9) : 0; }

    // Times `op` (warm-up, then each repeat); the device is synchronised after every run by
    // reading one byte back, so a GPU's queued work is inside the interval.
    template <class Op>
    SampleStats time_op(const void* sync_from, Op&& op) {
        if (dry) {
            expected_s += (plan.warmup + plan.repeats) * predicted_s;
            return SampleStats{.repeats = plan.repeats};
        }
        std::vector<double> t;
        char byte = 0;
        for (int i = 0; i < plan.warmup + plan.repeats; ++i) {
            const auto t0 = clock_type::now();
            op();
            be().download(&byte, sync_from, 1);
            if (i >= plan.warmup) t.push_back(since(t0));
        }
        return sample_stats(std::move(t));
    }

    void emit(nlohmann::json j, const SampleStats& st) {
        ++probes;
        if (dry) return;
        j["median_s"] = st.median_s;
        j["mean_s"] = st.mean_s;
        j["spread"] = st.spread;
        j["repeats"] = st.repeats;
        nlohmann::json line = metrics_event(src, "probe");
        line.update(j);
        emit_metrics_line(line);
    }

    // Buffers and their contents exist only in the real pass.
    // A probe bound by device memory: its preset time is the bytes it moves at hbm_gbps.
    template <class Op>
    SampleStats time_bytes(double bytes, const void* sync_from, Op&& op) {
        predicted_s = preset_seconds_for_bytes(bytes, gpu().hbm_gbps);
        return time_op(sync_from, op);
    }

    void* alloc(int64_t bytes, const char* what) {
        if (dry) return nullptr;
        return be().alloc(MEM_WORKSPACE, (size_t)std::max<int64_t>(bytes, 1), what);
    }
    void fill(void* x, DType t, float v, int64_t n) {
        if (!dry) be().fill(x, t, v, n);
    }

    // One GEMM of the job (fwd y = x·Wᵀ, dgrad dx = dy·W, wgrad dW += dyᵀ·x: the three calls
    // of the engine's linear layer, model.cpp) at rows R, width in → out.
    void gemm_family(const char* name, int64_t R, int64_t in, int64_t out, DType fwd_out) {
        const DType t = r.cfg.act;
        const int64_t es = (int64_t)dtype_size(t);
        void* x = alloc(R * in * es, "probe x");
        void* w = alloc(out * in * es, "probe W");
        void* y = alloc(R * out * std::max<int64_t>(es, (int64_t)dtype_size(fwd_out)), "probe y");
        void* gw = alloc(out * in * 4, "probe dW");
        fill(x, t, 0.01f, R * in);
        fill(w, t, 0.02f, out * in);
        fill(y, t, 0.03f, R * out);
        struct Pass {
            const char* pass;
            int64_t M, N, K;
        };
        for (const Pass& p : {Pass{"fwd", R, out, in}, Pass{"dgrad", R, in, out}, Pass{"wgrad", out, in, R}}) {
            Backend::Gemm g;
            g.M = p.M, g.N = p.N, g.K = p.K;
            g.a_type = g.b_type = t;
            if (p.pass[0] == 'f') {
                g.trans_b = true, g.A = x, g.lda = in, g.B = w, g.ldb = in, g.C = y, g.c_type = fwd_out, g.ldc = out;
            } else if (p.pass[0] == 'd') {
                g.A = y, g.lda = out, g.B = w, g.ldb = in, g.C = x, g.c_type = t, g.ldc = in;
            } else {
                g.trans_a = true, g.beta = 1.0f, g.A = y, g.lda = out, g.B = x, g.ldb = in, g.C = gw,
                g.c_type = DType::f32, g.ldc = in;
            }
            const double flops = 2.0 * (double)p.M * (double)p.N * (double)p.K;
            predicted_s = preset_seconds_for_flops(flops);
            const SampleStats st = time_op(g.C, [&] { be().gemm(g); });
            emit({{"kind", "gemm"}, {"name", std::string(name) + "." + p.pass}, {"dtype", dtype_name(t)},
                  {"shape", {p.M, p.N, p.K}}, {"flops", flops},
                  {"tflops", st.median_s > 0 ? flops / st.median_s / 1e12 : 0.0}},
                 st);
        }
        for (void* p : {x, w, y, gw}) be().release(p);
    }

    void compute() {
        const EngineConfig& c = r.cfg;
        const int64_t R = c.rows(), h = c.model.hidden, D = c.head_dim();
        if (c.layers > 0) {
            gemm_family("qkv", R, h, (c.heads_l() + 2 * c.kv_l()) * D, c.act);
            gemm_family("attn_proj", R, c.heads_l() * D, h, c.act);
            gemm_family("mlp_up", R, h, c.ffn_l(), c.act);
            gemm_family("mlp_down", R, c.ffn_l(), h, c.act);
        }
        // The LM head writes f32 logits (the f32 loss), on the last stage.
        if (c.last) gemm_family("lm_head", R, h, c.vocab_l(), DType::f32);
        sustained_gemm(R, h, c.layers > 0 ? c.ffn_l() : c.vocab_l());
        if (c.layers > 0) attention();
    }

    // The attention core at the job's shape: scores Q·Kᵀ, causal softmax and context P·V
    // (forward), their gradients (backward), as the engine's attention ops run them.
    // FLOPs as the estimators count them: 4·B·H·T²·D forward (two products over the full
    // T×T, not halved for the causal mask), twice that backward.
    void attention() {
        const EngineConfig& c = r.cfg;
        const DType t = c.act;
        const int64_t es = (int64_t)dtype_size(t), B = c.micro_batch, T = c.seq, H = c.heads_l(), G = c.kv_l(),
                      D = c.head_dim(), rows = B * T;
        void* qkv = alloc(rows * (H + 2 * G) * D * es, "probe qkv");
        void* dqkv = alloc(rows * (H + 2 * G) * D * es, "probe dqkv");
        void* ctx = alloc(rows * H * D * es, "probe ctx");
        void* dctx = alloc(rows * H * D * es, "probe dctx");
        void* probs = alloc(B * H * T * T * es, "probe probs");
        void* ws = alloc(dry ? 0 : be().attention_backward_workspace(t, B, T, H, G, D), "probe attention workspace");
        fill(qkv, t, 0.01f, rows * (H + 2 * G) * D);
        fill(dctx, t, 0.01f, rows * H * D);
        const double fwd = 4.0 * (double)B * (double)H * (double)T * (double)T * (double)D;
        for (const bool backward : {false, true}) {
            const double flops = backward ? 2 * fwd : fwd;
            predicted_s = preset_seconds_for_flops(flops);
            const SampleStats st =
                backward ? time_op(dqkv, [&] { be().attention_backward(t, dqkv, dctx, probs, qkv, B, T, H, G, D, ws); })
                         : time_op(ctx, [&] { be().attention_forward(t, ctx, probs, qkv, B, T, H, G, D, ws); });
            emit({{"kind", "attention"}, {"name", backward ? "attention.bwd" : "attention.fwd"}, {"dtype", dtype_name(t)},
                  {"shape", {B, H, T, D}}, {"flops", flops}, {"tflops", st.median_s > 0 ? flops / st.median_s / 1e12 : 0.0}},
                 st);
        }
        for (void* q : {qkv, dqkv, ctx, dctx, probs, ws}) be().release(q);
    }

    // Throughput over time, not one call: the MLP's forward GEMM back to back for a window
    // of `chunk_s` per repeat (many scheduler time slices), time per call = window / calls.
    // A single call's median hides a host whose cores are shared (the call runs at full
    // speed whenever it runs); this probe shows it, and the preflight compares hosts by it.
    void sustained_gemm(int64_t R, int64_t in, int64_t out) {
        const DType t = r.cfg.act;
        const int64_t es = (int64_t)dtype_size(t);
        const double chunk_s = plan.repeats <= 5 ? 0.05 : 0.1;
        const double flops = 2.0 * (double)R * (double)out * (double)in;
        SampleStats st{.repeats = plan.repeats};
        if (dry) {
            expected_s += plan.repeats * chunk_s;
        } else {
            void* x = alloc(R * in * es, "probe x");
            void* w = alloc(out * in * es, "probe W");
            void* y = alloc(R * out * es, "probe y");
            fill(x, t, 0.01f, R * in);
            fill(w, t, 0.02f, out * in);
            std::vector<double> per_call;
            char byte = 0;
            for (int k = 0; k < plan.repeats; ++k) {
                const auto t0 = clock_type::now();
                int64_t calls = 0;
                do {
                    be().gemm(false, true, R, out, in, 1.0f, x, w, 0.0f, y, t, t);
                    be().download(&byte, y, 1);
                    ++calls;
                } while (since(t0) < chunk_s);
                per_call.push_back(since(t0) / (double)calls);
            }
            st = sample_stats(std::move(per_call));
            for (void* q : {x, w, y}) be().release(q);
        }
        emit({{"kind", "gemm"}, {"name", "mlp_up.fwd.sustained"}, {"dtype", dtype_name(t)}, {"shape", {R, out, in}},
              {"flops", flops}, {"window_s", chunk_s}, {"tflops", st.median_s > 0 ? flops / st.median_s / 1e12 : 0.0}},
             st);
    }

    // Memory bandwidth (a device copy: bytes read + written) and the engine's element-wise
    // kernels at the job's activation sizes; the host cost of one tiny op.
    void elementwise() {
        const EngineConfig& c = r.cfg;
        const DType t = c.act;
        const int64_t R = c.rows(), h = c.model.hidden, es = (int64_t)dtype_size(t);
        {
            const int64_t bytes = plan.repeats <= 5 ? (16 << 20) : (64 << 20);
            void* a = alloc(bytes, "probe copy src");
            void* b = alloc(bytes, "probe copy dst");
            const SampleStats st = time_bytes(2.0 * (double)bytes, b, [&] { be().copy(b, a, DType::f32, bytes / 4); });
            emit({{"kind", "memory"}, {"name", "copy"}, {"bytes", 2 * bytes},
                  {"gbps", st.median_s > 0 ? 2.0 * (double)bytes / st.median_s / 1e9 : 0.0}},
                 st);
            be().release(a), be().release(b);
        }
        void* x = alloc(R * h * es, "probe act x");
        void* y = alloc(R * h * es, "probe act y");
        void* w = alloc(h * es, "probe norm w");
        void* bias = alloc(h * es, "probe norm b");
        float* mean = (float*)alloc(R * 4, "probe mean");
        float* rstd = (float*)alloc(R * 4, "probe rstd");
        fill(x, t, 0.5f, R * h);
        fill(w, t, 1.0f, h);
        auto emit_elementwise = [&](const char* name, int64_t elements, int64_t bytes, const SampleStats& st) {
            emit({{"kind", "elementwise"}, {"name", name}, {"dtype", dtype_name(t)}, {"elements", elements}, {"bytes", bytes},
                  {"gbps", st.median_s > 0 ? (double)bytes / st.median_s / 1e9 : 0.0}},
                 st);
        };
        if (c.layernorm())
            emit_elementwise("layernorm.fwd", R * h, 2 * R * h * es,
                             time_bytes(2.0 * R * h * es, y, [&] { be().layernorm_forward(t, y, mean, rstd, x, w, bias, R, h, 1e-5f); }));
        else
            emit_elementwise("rmsnorm.fwd", R * h, 2 * R * h * es,
                             time_bytes(2.0 * R * h * es, y, [&] { be().rmsnorm_forward(t, y, rstd, x, w, R, h, 1e-5f); }));
        if (c.swiglu())
            emit_elementwise("swiglu.fwd", R * h, 3 * R * h * es, time_bytes(3.0 * R * h * es, y, [&] { be().swiglu_forward(t, y, x, x, R * h); }));
        else
            emit_elementwise("gelu.fwd", R * h, 2 * R * h * es, time_bytes(2.0 * R * h * es, y, [&] { be().gelu_forward(t, y, x, R * h); }));
        for (void* p : {x, y, w, bias}) be().release(p);
        be().release(mean), be().release(rstd);

        if (c.last) {  // softmax + cross entropy over this rank's vocabulary shard (f32; dlogits in c.act, as the engine)
            const int64_t V = c.vocab_l();
            float* logits = (float*)alloc(R * V * 4, "probe logits");
            float* loss = (float*)alloc(R * 4, "probe loss");
            int32_t* tgt = (int32_t*)alloc(R * 4, "probe targets");
            fill(logits, DType::f32, 0.1f, R * V);
            const int64_t valid = std::min<int64_t>(V, c.model.vocab);
            emit_elementwise("softmax_xent", R * V, 2 * R * V * 4,
                             time_bytes(2.0 * R * V * 4, loss, [&] { be().xent_fused(loss, logits, c.act, logits, tgt, 1.0f, R, V, 0, valid); }));
            be().release(logits), be().release(loss), be().release(tgt);
        }
        {  // AdamW over a layer's worth of this rank's parameters (f32 p, g, m, v: 16 bytes/element read + written)
            const int64_t n = std::clamp<int64_t>(12 * h * h / std::max(1, c.tp), 1 << 16, 1 << 24);
            float* p = (float*)alloc(n * 4, "probe adamw p");
            float* g = (float*)alloc(n * 4, "probe adamw g");
            float* m = (float*)alloc(n * 4, "probe adamw m");
            float* v = (float*)alloc(n * 4, "probe adamw v");
            double* scalars = (double*)alloc(STEP_SCALAR_COUNT * 8, "probe step scalars");
            const double host_scalars[STEP_SCALAR_COUNT] = {0, 0, 1, 0, 1, 1, 0};
            if (!dry) be().upload(scalars, host_scalars, sizeof host_scalars);
            emit_elementwise("adamw", n, 7 * n * 4,
                             time_bytes(7.0 * n * 4, p, [&] { be().adamw(p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, scalars, 1); }));
            for (void* q : {(void*)p, (void*)g, (void*)m, (void*)v, (void*)scalars}) be().release(q);
        }
        {  // the host's cost of one op: a one-element fill, dominated by launch / dispatch
            void* one = alloc(4, "probe one");
            predicted_s = 0;
            emit({{"kind", "host_op"}, {"name", "fill1"}}, time_op(one, [&] { be().fill(one, DType::f32, 1.0f, 1); }));
            be().release(one);
        }
    }

    // The engine's own passes, in the step's order: the stage's model and activation slots as
    // training builds them (build_model, alloc_activations), then per micro-batch the
    // embedding, every layer's forward (layer_forward), the head's loss and its gradient
    // (output_forward_backward), every layer's backward in reverse and the embedding's —
    // the calls PipelineRun makes (schedule.cpp), with the activation slot changing from one
    // micro-batch to the next as the step's do. What the isolated probes above miss lands
    // here: the element-wise ops between the GEMMs, operands no longer in cache, the BLAS and
    // OpenMP threads waking between calls, the 16-bit operand widening. Each sample is the
    // pass's compute, the time of its TP collectives taken out (StageComm::tp_seconds); a
    // layer's is the stage's layers over their count. With tp > 1 the collectives' own
    // in-step time is a sample too (`layer.fwd.tp`, `layer.bwd.tp`: per layer;
    // `embedding.fwd.tp`, `embedding.bwd.tp`, `head.fwd_bwd.tp`), every TP peer running the
    // same passes at once. Shape: B, T, h, local heads, local KV heads,
    // local FFN width, tp, sequence parallel + 1, recompute + 1 (what the time model matches).
    // Not on the CUDA simulator: it emulates every kernel on the host (a tiny-gpt layer's
    // forward takes about a second there), its times say nothing of a GPU, and the same
    // passes are what its training tests run.
    void engine_passes() {
        if (std::string(be().name()) == "cuda-sim") return;
        const EngineConfig& c = r.cfg;
        const int nl = c.chunk_layers.empty() ? c.layers : c.chunk_layers[0];
        const std::vector<int64_t> shape = {c.micro_batch, c.seq,  c.model.hidden, c.heads_l(), c.kv_l(), c.ffn_l(),
                                            c.tp, c.sequence_parallel ? 2 : 1, (int)c.recompute() + 1};
        struct Pass {
            const char* name;
            std::vector<double> compute, tp;
        };
        Pass lf{"layer.fwd", {}, {}}, lb{"layer.bwd", {}, {}}, ef{"embedding.fwd", {}, {}}, eb{"embedding.bwd", {}, {}},
            hd{"head.fwd_bwd", {}, {}};
        auto emit_pass = [&](Pass& p, bool with_tp) {
            emit({{"kind", "layer"}, {"name", p.name}, {"dtype", dtype_name(c.act)}, {"shape", shape}},
                 dry ? SampleStats{.repeats = plan.repeats} : sample_stats(std::move(p.compute)));
            if (with_tp && c.tp > 1)
                emit({{"kind", "layer"}, {"name", std::string(p.name) + ".tp"}, {"dtype", dtype_name(c.act)}, {"shape", shape}},
                     dry ? SampleStats{.repeats = plan.repeats} : sample_stats(std::move(p.tp)));
        };
        auto emit_all = [&] {
            if (nl > 0) emit_pass(lf, true), emit_pass(lb, true);
            if (c.first) emit_pass(ef, true), emit_pass(eb, true);
            if (c.last) emit_pass(hd, true);
        };
        if (dry) {
            // The preset's time of the layers' GEMMs and attention, forward and backward (3×).
            const double R = (double)c.rows(), h = (double)c.model.hidden, D = (double)c.head_dim();
            const double layer = 2 * R * h * ((double)(c.heads_l() + 2 * c.kv_l()) * D + (double)c.heads_l() * D +
                                              (c.swiglu() ? 3.0 : 2.0) * (double)c.ffn_l()) +
                                 4.0 * c.micro_batch * (double)c.heads_l() * c.seq * c.seq * D;
            const double head = c.last ? 6 * R * h * (double)c.vocab_l() : 0;
            const double per = preset_seconds_for_flops(3 * layer * nl + head);  // one micro-batch
            expected_s += plan.warmup * per + std::clamp(plan.pass_span_s, plan.repeats * per, plan.max_pass_repeats * per);
            emit_all();
            step_bursts([](int, bool) {}, 0, per, shape);
            return;
        }
        Backend& b = be();
        Model m = build_model(b, c, (uint64_t)job.training.seed);
        Activations a = alloc_activations(b, c);
        const int64_t Rl = c.rows_local(), h = c.model.hidden;
        void* stage_out = alloc(Rl * h * (int64_t)dtype_size(c.act), "probe stage output");
        if (a.tokens_staging) {  // ids spread over the vocabulary, as text's are (the embedding's rows differ)
            std::vector<int32_t> ids((size_t)(c.micro_batch * (c.seq + 1)));
            for (size_t k = 0; k < ids.size(); ++k) ids[k] = (int32_t)((k * 7919 + 13) % (size_t)c.model.vocab);
            b.upload(a.tokens_staging, ids.data(), ids.size() * sizeof(int32_t));
            for (int32_t* slot_ids : a.slot_tokens) b.split_tokens(slot_ids, nullptr, a.tokens_staging, c.micro_batch, c.seq);
            if (c.last) b.split_tokens(nullptr, a.out.targets, a.tokens_staging, c.micro_batch, c.seq);
        }
        double tp_s = 0;
        StageComm comm{r.groups.tp.get(), &tp_s};
        const float loss_scale = (float)(1.0 / ((double)c.rows() * c.grad_accum * c.dp));
        char byte = 0;
        // Times `run` to completion; its compute (less the TP collectives) and those go to `p`.
        auto timed = [&](Pass& p, double per, const void* sync, auto&& run) {
            const double tp0 = tp_s;
            const auto t0 = clock_type::now();
            run();
            b.download(&byte, sync, 1);
            const double total = since(t0), tp = tp_s - tp0;
            p.compute.push_back(std::max(0.0, total - tp) / per);
            p.tp.push_back(tp / per);
        };
        Pass scratch{"warm-up", {}, {}};
        // Shared cores, pipeline: the model divides every pass by the share of the cores it
        // had, taking each pass to have run with every rank of the host computing. The stages
        // do not do the same work, though: while the last one runs the head, the others
        // would go on to their backward and then wait for it, and its passes would run with
        // the cores to itself. So where the last stage runs the head, the other stages run
        // `filler` untimed layer forwards (on another activation slot) of about the head's
        // time, and every micro-batch starts at a world barrier: the stages keep in step and
        // each pass is timed beside the others' work. The count is agreed over the world
        // (from the largest head and layer-forward times), so TP peers run the same calls.
        const bool stages_in_step = shared_cores && !(c.first && c.last) && nl > 0;
        int filler = 0;
        double head_wall = 0, fwd_wall = 0;  // this rank's warm-up: the head, one layer's forward
        auto micro_batch = [&](int i, bool kept) {
            const int slot = i % std::max(1, c.slots);
            std::vector<LayerActs>& layers = a.slot_layers[(size_t)slot];
            if (stages_in_step) r.groups.world->barrier();
            void* stage_in = nl > 0 ? layers[0].ln1_in : a.out.lnf_in;
            if (c.first)
                timed(kept ? ef : scratch, 1, stage_in, [&] { embedding_forward(m, a, a.slot_tokens[(size_t)slot], stage_in, comm); });
            if (nl > 0) {
                const auto f0 = clock_type::now();
                timed(kept ? lf : scratch, nl, c.last ? a.out.lnf_in : stage_out, [&] {
                    for (int li = 0; li < nl; ++li) {
                        void* out = li + 1 < nl ? layers[(size_t)li + 1].ln1_in : c.last ? a.out.lnf_in : stage_out;
                        layer_forward(m, a, li, layers[(size_t)li], out, comm);
                    }
                });
                if (i == 0) fwd_wall = since(f0) / nl;
            }
            if (!c.last && filler > 0) {  // the head's time, beside the last stage's head
                std::vector<LayerActs>& other = a.slot_layers[(size_t)((slot + 1) % std::max(1, c.slots))];
                for (int k = 0; k < filler; ++k) layer_forward(m, a, 0, other[0], stage_out, comm);
                b.download(&byte, stage_out, 1);
            }
            // The gradient arriving from the next stage (or the head's): small values, set
            // afresh each time so that repeats do not grow it into denormals or infinities.
            void* d = a.d_stream;
            b.fill(d, c.act, 1e-3f, Rl * h);
            if (c.last) {
                const auto h0 = clock_type::now();
                timed(kept ? hd : scratch, 1, d, [&] { output_forward_backward(m, a, loss_scale, d, nullptr, comm); });
                if (i == 0) head_wall = since(h0);
            }
            if (nl > 0)
                timed(kept ? lb : scratch, nl, d, [&] {
                    for (int li = nl - 1; li >= 0; --li) {
                        if (c.recompute_full) layer_forward(m, a, li, layers[(size_t)li], a.w_dres, comm);
                        layer_backward(m, a, li, layers[(size_t)li], d, d, comm);
                    }
                });
            if (c.first)
                timed(kept ? eb : scratch, 1, m.wte->g, [&] { embedding_backward(m, a, a.slot_tokens[(size_t)slot], d, comm); });
        };
        // At least the plan's repeats and, for short passes, enough of them to span
        // plan.pass_span_s (at most plan.max_pass_repeats): a mean over many micro-batches, as a step's time is a sum over them, so
        // that a moment of other load on the cores does not decide it (over 0.3 s, 9 repeats
        // of tiny TP2's passes, the median TP time of a layer's backward was 0.43–0.58 ms in
        // three calibrations and 7.9 ms in a fourth). Every rank runs as many
        // (the TP peers' collectives pair up): the largest count any rank asks for, agreed by
        // one world all-reduce after the first warm-up.
        const auto t0 = clock_type::now();
        micro_batch(0, false);
        const double first_s = since(t0);
        // [repeats, head seconds, one layer's forward seconds], each the largest over the world.
        const double most = std::max(plan.repeats, plan.max_pass_repeats);
        float agree[3] = {(float)std::clamp<double>(first_s > 0 ? std::ceil(plan.pass_span_s / first_s) : most, plan.repeats, most),
                          (float)head_wall, (float)fwd_wall};
        float* agreed = (float*)alloc(sizeof agree, "probe pass count");
        b.upload(agreed, agree, sizeof agree);
        r.groups.world->all_reduce(agreed, 3, DType::f32, ReduceOp::max);
        b.download(agree, agreed, sizeof agree);
        b.release(agreed);
        const float repeats = agree[0];
        if (stages_in_step && agree[2] > 0) filler = (int)std::lround(agree[1] / agree[2]);
        const auto loop0 = clock_type::now();
        for (int i = 1; i < plan.warmup + (int)repeats; ++i) micro_batch(i, i >= plan.warmup);
        const double micro_batch_s = since(loop0) / std::max(1, plan.warmup + (int)repeats - 1);
        step_bursts(micro_batch, plan.warmup + (int)repeats, micro_batch_s, shape);
        free_activations(b, a);
        free_model(m);
        b.release(stage_out);
        emit_all();
    }

    // dpwait: a step ends at its data-parallel collective, which starts when the group's
    // slowest member gets there. Each rank's compute between two of them (one step's
    // micro-batches) varies from step to step — other work on its cores, the scheduler — so
    // the collective waits, on average, E[max over the group] − E[own] beyond its transfer:
    // a wait no back-to-back collective probe shows (every member is already in the call).
    // Measured as it happens: `rounds` bursts of the step's micro-batches through the
    // engine's own passes, every rank starting each burst together (a world barrier, as the
    // previous step's collective leaves them); each rank times its own burst, and one
    // all-reduce (max) over the DP group — untimed — gives the group's slowest. Emitted as
    // "step.compute" (own) and "step.compute.dp_max" (the slowest, the same on every member),
    // with the burst's micro-batch count and the group's size: the estimator takes the wait
    // from their means (profile_times.cpp). A step longer than kBurstCap runs bursts of fewer
    // micro-batches (at least one). Every rank runs the same bursts (agreed over the world):
    // TP peers' collectives and the stages' barriers pair up inside them.
    template <class MicroBatch>
    void step_bursts(MicroBatch&& micro_batch, int next, double micro_batch_s, const std::vector<int64_t>& shape) {
        Communicator* dp = r.groups.dp.get();
        if (!dp || dp->size() <= 1) return;
        constexpr double kBurstCap = 2.0;  // seconds of one burst at most
        constexpr int kMaxRounds = 30;
        const int min_rounds = plan.repeats;  // 9, --quick 5
        const EngineConfig& c = r.cfg;
        auto emit_both = [&](int mbs, const SampleStats& own, const SampleStats& slowest) {
            nlohmann::json j = {{"kind", "layer"}, {"dtype", dtype_name(c.act)}, {"shape", shape},
                                {"group", "dp"}, {"group_size", dp->size()}, {"micro_batches", mbs}};
            j["name"] = "step.compute";
            emit(j, own);
            j["name"] = "step.compute.dp_max";
            emit(j, slowest);
        };
        // A burst's micro-batches (the step's, fewer past kBurstCap) and the rounds that fill
        // twice the passes' span, from one micro-batch's seconds.
        struct Bursts {
            int micro_batches, rounds;
        };
        auto bursts_for = [&](double mb_s) {
            const int mbs = std::clamp((int)std::floor(kBurstCap / std::max(mb_s, 1e-9)), 1, std::max(1, c.grad_accum));
            const double burst = mbs * mb_s;
            return Bursts{mbs, (int)std::clamp<double>(std::ceil(2 * plan.pass_span_s / std::max(burst, 1e-9)), min_rounds, kMaxRounds)};
        };
        if (dry) {
            const Bursts bursts = bursts_for(micro_batch_s);
            expected_s += bursts.rounds * bursts.micro_batches * micro_batch_s;
            emit_both(bursts.micro_batches, SampleStats{.repeats = min_rounds}, SampleStats{.repeats = min_rounds});
            return;
        }
        Backend& b = be();
        // The micro-batch's seconds agreed over the world (the largest), then the burst and rounds from it.
        float agree = (float)micro_batch_s;
        float* buf = (float*)alloc(sizeof(float), "probe step burst");
        b.upload(buf, &agree, sizeof agree);
        r.groups.world->all_reduce(buf, 1, DType::f32, ReduceOp::max);
        b.download(&agree, buf, sizeof agree);
        const Bursts bursts = bursts_for(agree);
        std::vector<double> own, slowest;
        for (int k = 0; k < bursts.rounds; ++k) {
            r.groups.world->barrier();
            const auto t0 = clock_type::now();
            for (int i = 0; i < bursts.micro_batches; ++i) micro_batch(next++, false);
            const float t = (float)since(t0);
            b.upload(buf, &t, sizeof t);
            dp->all_reduce(buf, 1, DType::f32, ReduceOp::max);
            float g = 0;
            b.download(&g, buf, sizeof g);
            own.push_back(t), slowest.push_back(g);
        }
        b.release(buf);
        emit_both(bursts.micro_batches, sample_stats(std::move(own)), sample_stats(std::move(slowest)));
    }

    // Members per node and nodes of a group (the group shape the estimator's collective
    // model takes), from the layout's node of each member.
    nlohmann::json group_shape(const Communicator& g) {
        std::set<int> nodes;
        for (int gr : g.global_ranks()) nodes.insert(r.layout.ranks[(size_t)gr].node);
        return {{"group", g.name()}, {"group_size", g.size()}, {"nodes", (int)nodes.size()},
                {"members_per_node", g.size() / std::max<int>(1, (int)nodes.size())}};
    }

    // A collective of the back-to-back sweep, timed in rounds with the others (run_sweep).
    struct SweepItem {
        nlohmann::json j;  // the group's shape, op and bytes
        double factor = 1, predicted_s = 0;
        const void* sync = nullptr;
        std::function<void()> call;
        std::vector<double> t;
    };
    std::vector<SweepItem> sweep{};

    // The sample's group shape, op and size; sets predicted_s (the preset's link: intra-node
    // inside one node, the slower inter-node link across nodes).
    nlohmann::json comm_head(Communicator& g, const char* op, int64_t bytes, double factor) {
        nlohmann::json j = group_shape(g);
        predicted_s = preset_seconds_for_bytes((double)bytes * factor,
                                               j["nodes"].get<int>() > 1 ? job.cluster.inter_gbps : job.cluster.intra_gbps);
        j["kind"] = "comm";
        j["name"] = op;
        j["bytes"] = bytes;
        return j;
    }
    void emit_comm(nlohmann::json j, double factor, const SampleStats& st) {
        const double bytes = j["bytes"].get<double>();
        j["algbw_gbps"] = st.median_s > 0 ? bytes / st.median_s / 1e9 : 0.0;
        j["busbw_gbps"] = st.median_s > 0 ? bytes * factor / st.median_s / 1e9 : 0.0;
        j["bus_factor"] = factor;
        emit(j, st);
    }

    // Back to back: queued for run_sweep, which times every queued call once per round.
    void comm_sample(Communicator& g, const char* op, int64_t bytes, const void* buf, std::function<void()> call) {
        const double factor = collective_bus_factor(op, g.size());  // nccl-tests' busbw convention
        nlohmann::json j = comm_head(g, op, bytes, factor);
        sweep.push_back({std::move(j), factor, predicted_s, buf, std::move(call), {}});
    }

    // The sweep in rounds: each round times every queued call once, in the same order on every
    // rank (so the groups' calls pair up). A moment of other load on the cores then costs one
    // repeat of every size, not every repeat of the sizes it fell on (timed size by size, a
    // 4 KiB world all-reduce of 2 ranks probed at 4.0 ms in 3 calibrations of 4 and at 0.18 ms
    // in the fourth, minutes apart on the same machine).
    void run_sweep() {
        char byte = 0;
        for (int i = 0; !dry && i < plan.warmup + plan.repeats; ++i)
            for (SweepItem& it : sweep) {
                const auto t0 = clock_type::now();
                it.call();
                be().download(&byte, it.sync, 1);
                if (i >= plan.warmup) it.t.push_back(since(t0));
            }
        for (SweepItem& it : sweep) {
            if (dry) expected_s += (plan.warmup + plan.repeats) * it.predicted_s;
            emit_comm(std::move(it.j), it.factor, dry ? SampleStats{.repeats = plan.repeats} : sample_stats(std::move(it.t)));
        }
        sweep.clear();
    }

    // Between compute bursts (comm_in_step): `before` runs, then the call is timed;
    // `between_s` is the compute each rank ran before each call.
    void comm_sample_in_step(Communicator& g, const char* op, int64_t bytes, void* buf, std::function<void()> call,
                             std::function<void()> before) {
        const double factor = collective_bus_factor(op, g.size());
        nlohmann::json j = comm_head(g, op, bytes, factor);
        SampleStats st;
        double between_s = 0;
        if (dry) {
            expected_s += (plan.warmup + in_step_repeats()) * (predicted_s + before_predicted_s);
            st.repeats = in_step_repeats();
        } else {
            std::vector<double> t, b;
            char byte = 0;
            for (int i = 0; i < plan.warmup + in_step_repeats(); ++i) {
                const auto t0 = clock_type::now();
                before();
                be().download(&byte, buf, 1);
                const auto t1 = clock_type::now();
                call();
                be().download(&byte, buf, 1);
                if (i >= plan.warmup) t.push_back(since(t1)), b.push_back(std::chrono::duration<double>(t1 - t0).count());
            }
            st = sample_stats(std::move(t));
            between_s = sample_stats(std::move(b)).median_s;
        }
        j["between_s"] = between_s;
        emit_comm(std::move(j), factor, st);
    }

    // Collectives of every group kind the layout has (size > 1) over the message sweep;
    // pipeline p2p as a ring exchange inside the pp group (each stage sends to the next and
    // receives from the previous at once, every link busy as in 1F1B's steady state).
    void comm() {
        const int64_t largest = plan.message_bytes.back();
        void* buf = alloc(largest, "probe comm buffer");
        void* rbuf = alloc(largest, "probe comm receive buffer");
        if (!dry) r.groups.world->barrier();
        for (Communicator* g : {r.groups.tp.get(), r.groups.dp.get(), r.groups.world.get()}) {
            if (!g || g->size() <= 1) continue;
            const int n = g->size();
            for (int64_t bytes : plan.message_bytes) {
                const int64_t count = bytes / 4;
                comm_sample(*g, "all_reduce", bytes, buf, [=] { g->all_reduce(buf, count, DType::f32, ReduceOp::sum); });
                const int64_t per = std::max<int64_t>(1, count / n), total = per * n * 4;
                comm_sample(*g, "reduce_scatter", total, buf, [=] { g->reduce_scatter(buf, per, DType::f32, ReduceOp::sum); });
                comm_sample(*g, "all_gather", total, buf, [=] { g->all_gather(buf, per, DType::f32); });
            }
        }
        if (Communicator* pp = r.groups.pp.get(); pp && pp->size() > 1) {
            const int n = pp->size(), next = (pp->rank() + 1) % n, prev = (pp->rank() + n - 1) % n;
            for (int64_t bytes : plan.message_bytes) {
                const int64_t count = bytes / 4;
                comm_sample(*pp, "p2p", bytes, rbuf, [=] {
                    pp->group_start();
                    pp->send(buf, count, DType::f32, next);
                    pp->recv(rbuf, count, DType::f32, prev);
                    pp->group_end();
                });
            }
        }
        run_sweep();
        be().release(buf), be().release(rbuf);
        links();
    }

    // Links between hosts (nodes), for the preflight's link check: the first rank of every
    // node exchanges messages with the first rank of every other node (both send and
    // receive at once), one partner at a time: a round-robin tournament (the circle method:
    // n − 1 rounds, every pair once, a bye for an odd node count), a world barrier before
    // each round so no two rounds share a link. At the smallest and the largest message of
    // the sweep (latency and bandwidth); the pair's lower node reports it, naming the peer.
    void links() {
        const RankLayout& L = r.layout;
        const int n = L.nodes;
        if (n < 2) return;
        std::vector<int> first(n, -1);
        for (size_t g = 0; g < L.ranks.size(); ++g)
            if (first[(size_t)L.ranks[g].node] < 0) first[(size_t)L.ranks[g].node] = (int)g;
        const int me = r.groups.world->rank(), node = L.ranks[(size_t)me].node;
        const bool speaks = first[(size_t)node] == me;
        const int players = n + n % 2;
        const int64_t sizes[] = {plan.message_bytes.front(), plan.message_bytes.back()};
        void* buf = alloc(sizes[1], "probe link buffer");
        void* rbuf = alloc(sizes[1], "probe link receive buffer");
        for (int round = 0; round + 1 < players; ++round) {
            if (!dry) r.groups.world->barrier();
            // Player players−1 stays put and meets `round`; the others pair as i ↔ 2·round − i.
            const int peer_node = node == players - 1 ? round
                                  : node == round     ? players - 1
                                                      : ((2 * round - node) % (players - 1) + (players - 1)) % (players - 1);
            if (!speaks || peer_node >= n || peer_node == node) continue;
            const int peer = first[(size_t)peer_node];
            for (int64_t bytes : sizes) {
                const int64_t count = bytes / 4;
                predicted_s = preset_seconds_for_bytes((double)bytes, job.cluster.inter_gbps);
                const SampleStats st = time_op(rbuf, [&] {
                    Communicator& w = *r.groups.world;
                    w.group_start();
                    w.send(buf, count, DType::f32, peer);
                    w.recv(rbuf, count, DType::f32, peer);
                    w.group_end();
                });
                if (node > peer_node) continue;  // one line per link, from its lower node
                emit({{"kind", "link"}, {"name", "p2p"}, {"bytes", bytes}, {"node", node}, {"peer_node", peer_node},
                      {"peer_rank", peer}, {"gbps", st.median_s > 0 ? (double)bytes / st.median_s / 1e9 : 0.0}},
                     st);
            }
        }
        be().release(buf), be().release(rbuf);
    }

    // Collectives between compute bursts, as a step makes them: every rank runs the layer's
    // MLP GEMM, then the collective, and only the collective is timed. With more ranks than
    // cores a peer is then often off its core when the call starts, and the call waits for
    // the scheduler to give it one — which back-to-back calls, every rank already waiting in
    // the collective, never show. Sizes: the job's own messages (the TP activation, the
    // p2p hop); the DP and world groups' one small collective per step (4 KiB).
    int in_step_repeats() const { return std::max(10, 2 * plan.repeats); }
    double before_predicted_s = 0;
    // Whether some host runs more busy threads than it has cores (decided with every rank,
    // shared_cores_somewhere): only there do calls wait for a core. On a host with a core per
    // thread the in-step times measured waits the step does not have (on 2 cores, 2 ranks: a
    // TP all-reduce 1.2–2.6 ms after the GEMM, 0.14 ms per call in training), so the probe
    // is not run and the model keeps the back-to-back curve.
    bool shared_cores = false;
    void comm_in_step() {
        if (!shared_cores) return;
        const EngineConfig& c = r.cfg;
        const DType t = c.act;
        const int64_t es = (int64_t)dtype_size(t), R = c.rows(), h = c.model.hidden,
                      F = c.layers > 0 ? c.ffn_l() : c.vocab_l();
        const int64_t act_bytes = std::max<int64_t>(4, R * h * es), hop_bytes = std::max<int64_t>(4, c.rows_local() * h * es);
        const int64_t largest = std::max<int64_t>({act_bytes, hop_bytes, 4 << 10});
        void* x = alloc(R * h * es, "probe x");
        void* w = alloc(F * h * es, "probe W");
        void* y = alloc(R * F * es, "probe y");
        void* buf = alloc(largest, "probe comm buffer");
        void* rbuf = alloc(largest, "probe comm receive buffer");
        fill(x, t, 0.01f, R * h);
        fill(w, t, 0.02f, F * h);
        before_predicted_s = preset_seconds_for_flops(2.0 * (double)R * (double)F * (double)h);
        auto burst = [&] { be().gemm(false, true, R, F, h, 1.0f, x, w, 0.0f, y, t, t); };
        if (!dry) r.groups.world->barrier();
        for (Communicator* g : {r.groups.tp.get(), r.groups.dp.get(), r.groups.world.get()}) {
            if (!g || g->size() <= 1) continue;
            const int n = g->size();
            const int64_t bytes = g == r.groups.tp.get() ? act_bytes : (4 << 10);
            const int64_t count = std::max<int64_t>(1, bytes / 4), per = std::max<int64_t>(1, count / n), total = per * n * 4;
            comm_sample_in_step(*g, "all_reduce", count * 4, buf, [&] { g->all_reduce(buf, count, DType::f32, ReduceOp::sum); }, burst);
            comm_sample_in_step(*g, "reduce_scatter", total, buf, [&] { g->reduce_scatter(buf, per, DType::f32, ReduceOp::sum); }, burst);
            comm_sample_in_step(*g, "all_gather", total, buf, [&] { g->all_gather(buf, per, DType::f32); }, burst);
        }
        if (Communicator* pp = r.groups.pp.get(); pp && pp->size() > 1) {
            const int n = pp->size(), next = (pp->rank() + 1) % n, prev = (pp->rank() + n - 1) % n;
            const int64_t count = std::max<int64_t>(1, hop_bytes / 4);
            comm_sample_in_step(*pp, "p2p", count * 4, rbuf, [&] {
                pp->group_start();
                pp->send(buf, count, DType::f32, next);
                pp->recv(rbuf, count, DType::f32, prev);
                pp->group_end();
            }, burst);
        }
        for (void* q : {x, w, y, buf, rbuf}) be().release(q);
    }
};

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) {
            const size_t at = line.find(':');
            if (at != std::string::npos) return line.substr(line.find_first_not_of(' ', at + 1));
        }
    return "unknown";
}

// What the CUDA runtime says of the visible devices (name, memory, driver), for a rank on
// the CUDA backend; null elsewhere.
nlohmann::json gpu_description(const BackendChoice* backend) {
#ifdef PTD_HAVE_CUDA
    if (backend && backend->kind == BackendKind::cuda) {
        char buf[8192];
        if (ptd_cuda_describe_devices(buf, sizeof buf) >= 0) return std::string(buf);
    }
#endif
    (void)backend;
    return nullptr;
}

}  // namespace

int run_probes(const JobSpec& job, const RankEnv& env, const TrainOptions& options, const ProbeOptions& probe) {
    ConnectedRank r;
    if (int rc = connect_rank(job, env, options, r)) return rc;
    Prober p{r, job, probe_plan(probe), MetricsSource{r.run_id, env.rank}};
    const int node = r.layout.ranks[(size_t)env.rank].node;
    {
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        nlohmann::json j = metrics_event(p.src, "probe");
        j["kind"] = "host";
        j["hostname"] = host;
        j["node"] = node;
        j["local_rank"] = env.local_rank;
        j["cpu_model"] = cpu_model_name();
        j["cores"] = (int)std::thread::hardware_concurrency();
        j["cpus"] = affinity_cpus();
        j["cpu_quota"] = cpu_quota_cores();
        j["memory_bytes"] = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGE_SIZE);
        j["threads"] = r.threads;
        j["blas"] = blas_choice().to_json();
        j["backend"] = r.be->name();
        const BackendChoice cpu_choice;
        j["device"] = (options.backend ? *options.backend : cpu_choice).to_json();
        j["gpu"] = gpu_description(options.backend);
        j["precision"] = to_string(job.training.precision);
        j["engine_version"] = probe.version;
        j["quick"] = probe.quick;
        emit_metrics_line(j);
    }
    const auto t0 = clock_type::now();
    {  // Shared cores anywhere: one world all-reduce of each rank's verdict on its own machine.
        const HostCores& hc = r.host_cores;
        const bool over = hc.share >= 0 ? share_oversubscribed(hc.share, cpu_quota_cores(), hc.ranks_on_machine, r.threads)
                                        : cores_oversubscribed(hc.ranks_on_machine, r.threads);
        float any = over ? 1.0f : 0.0f;
        all_reduce_host_floats(*r.be, *r.groups.world, &any, 1, ReduceOp::max);
        p.shared_cores = any > 0 && r.be->name() == std::string("cpu");
    }
    // The dry pass: how many probes and what the preset says they take (the "plan" line).
    p.dry = true;
    p.compute(), p.elementwise(), p.engine_passes(), p.comm(), p.comm_in_step();
    {
        nlohmann::json j = metrics_event(p.src, "probe");
        j["kind"] = "plan";
        j["probes"] = p.probes;
        j["expected_s"] = p.expected_s;
        j["warmup"] = p.plan.warmup;
        j["repeats"] = p.plan.repeats;
        emit_metrics_line(j);
    }
    p.dry = false;
    p.probes = 0;
    // Every rank computes at once, sharing the host's cores as a training step does.
    r.groups.world->barrier();
    p.compute(), p.elementwise(), p.engine_passes(), p.comm(), p.comm_in_step();
    nlohmann::json end = metrics_event(p.src, "probe");
    end["kind"] = "done";
    end["probes"] = p.probes;
    end["seconds"] = since(t0);
    emit_metrics_line(end);
    disconnect_rank(r);
    return 0;
}

}  // namespace ptd::engine
