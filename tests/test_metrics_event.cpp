// test_metrics_event.cpp — parse_metrics_line on real ptd-engine output (every field of
// every event kind) and on everything else a rank may print: plain text, broken or
// truncated JSON, other schemas, unknown events, wrong field types, huge numbers, deep
// nesting and binary garbage. None of it may throw or crash; each rejection says why.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "ptd/metrics_event.h"

using namespace ptd;

namespace {

// Written by `RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
// MASTER_PORT=29533 ptd-engine --job assets/jobs/tiny-local.toml --set cluster.gpus_per_node=1
// --set parallel.tp=1 --set parallel.pp=1 --steps 2` (checkpoint: --checkpoint-every 1;
// error: --resume in an empty run dir).
const std::string kStart = R"json({"backend":"cpu","coords":{"dp":0,"pp":0,"tp":0},"data":"synthetic: seed 1234, vocab 256, next = (3·prev + 1) mod vocab with 1/16 noise","event":"start","global_batch":8,"grad_accum":4,"layers":[0,4],"layout":{"dp":1,"order":"tp-cp-ep-dp-pp","pp":1,"recompute":"none","sequence_parallel":false,"tp":1,"zero":0},"memory":{"activations":{"current":2828288,"peak":2828288,"predicted":2828288.0},"communication":{"current":0,"peak":0,"predicted":null},"grads":{"current":882176,"peak":882176,"predicted":882176.0},"optimizer":{"current":1764352,"peak":1764352,"predicted":1764352.0},"params":{"current":882176,"peak":882176,"predicted":882176.0},"total":{"current":6916096,"peak":6916096,"predicted":6356992.0},"workspace":{"current":559104,"peak":559104,"predicted":null}},"micro_batch":2,"model":{"name":"tiny-gpt","params":220544,"vocab_padded":256},"params_local":220544,"peak_tflops":0.1,"rank":0,"resumed_from":null,"run_dir":"runs/20261122-024601-6977","run_id":"20261122-024601-6977","schema":"ptd.metrics/1","seq_len":64,"steps":20,"threads":2,"time":1795315561.4416955,"world_size":1})json";
const std::string kStep = R"json({"clipped":true,"coords":{"dp":0,"pp":0,"tp":0},"event":"step","grad_norm":1.1045378255795277,"loss":5.57439889293164,"lr":0.001,"memory":{"activations":{"current":2828288,"peak":2828288,"predicted":2828288.0},"communication":{"current":0,"peak":0,"predicted":null},"grads":{"current":882176,"peak":882176,"predicted":882176.0},"optimizer":{"current":1764352,"peak":1764352,"predicted":1764352.0},"params":{"current":882176,"peak":882176,"predicted":882176.0},"total":{"current":6916096,"peak":6950912,"predicted":6356992.0},"workspace":{"current":559104,"peak":593920,"predicted":null}},"mfu":0.38060905840568465,"rank":0,"run_id":"20261122-024601-6977","schema":"ptd.metrics/1","step":1,"tflops":0.03806090584056847,"time":{"compute":0.019366558,"dp_comm":1.032e-06,"optimizer":0.000468373,"pipeline_idle":0.0,"pp_comm":0.0,"step":0.019835963,"tp_comm":0.0},"tokens":512.0,"tokens_per_s":25811.70372217371})json";
const std::string kStep2 = R"json({"clipped":true,"coords":{"dp":0,"pp":0,"tp":0},"event":"step","grad_norm":1.334078184774123,"loss":5.44452871568501,"lr":0.000994459753267812,"memory":{"activations":{"current":2828288,"peak":2828288,"predicted":2828288.0},"communication":{"current":0,"peak":0,"predicted":null},"grads":{"current":882176,"peak":882176,"predicted":882176.0},"optimizer":{"current":1764352,"peak":1764352,"predicted":1764352.0},"params":{"current":882176,"peak":882176,"predicted":882176.0},"total":{"current":6916096,"peak":6950912,"predicted":6356992.0},"workspace":{"current":559104,"peak":593920,"predicted":null}},"mfu":0.4335846504745614,"rank":0,"run_id":"20261122-024601-6977","schema":"ptd.metrics/1","step":2,"tflops":0.04335846504745614,"time":{"compute":0.016974807,"dp_comm":1.222e-06,"optimizer":0.000436366,"pipeline_idle":0.0,"pp_comm":0.0,"step":0.017412395,"tp_comm":0.0},"tokens":512.0,"tokens_per_s":29404.340988129432})json";
const std::string kEnd = R"json({"event":"end","memory":{"activations":{"current":2828288,"peak":2828288,"predicted":2828288.0},"communication":{"current":0,"peak":0,"predicted":null},"grads":{"current":882176,"peak":882176,"predicted":882176.0},"optimizer":{"current":1764352,"peak":1764352,"predicted":1764352.0},"params":{"current":882176,"peak":882176,"predicted":882176.0},"total":{"current":6916096,"peak":6950912,"predicted":6356992.0},"workspace":{"current":559104,"peak":593920,"predicted":null}},"rank":0,"run_id":"20261122-024601-6977","schema":"ptd.metrics/1","seconds":0.037460452,"step":2,"steps_run":2,"time":1795315561.4793067})json";
const std::string kCheckpoint = R"json({"bytes":2646763,"dir":"/tmp/eng/run/checkpoints/step-00000001","event":"checkpoint","rank":0,"run_id":"20261122-024605-7001","schema":"ptd.metrics/1","seconds":0.018357675,"sha256":"599acf004af8d3702eb7541807982c3c42b271274ade61fb6a263c0676ea0046","step":1,"time":1795315565.3086796})json";
const std::string kError = R"json({"event":"error","message":"--resume: no complete checkpoint (a step-* directory with manifest.json) under /tmp/eng/nonexist/checkpoints","rank":0,"run_id":"20261122-024605-7008","schema":"ptd.metrics/1","time":1795315565.3340023})json";

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The problem text for `line`, asserting it is rejected.
std::string rejected(const std::string& line) {
    std::string problem = "stale";
    auto r = parse_metrics_line(line, &problem);
    EXPECT_FALSE(r.has_value()) << line;
    return problem;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
}

// The record of one line of run 20261122-024601-6977, which must parse, be of `kind` and name
// the run (an empty record otherwise).
MetricRecord parsed(const std::string& line, MetricKind kind, std::string* problem = nullptr) {
    auto r = parse_metrics_line(line, problem);
    EXPECT_TRUE(r.has_value()) << (problem ? *problem : "");
    if (!r) return {};
    EXPECT_EQ(r->kind, kind);
    EXPECT_EQ(r->run_id, "20261122-024601-6977");
    return *r;
}

}  // namespace

TEST(MetricsEvent, StartLineEveryField) {
    std::string problem;
    const MetricRecord r = parsed(kStart, MetricKind::start, &problem);
    EXPECT_TRUE(problem.empty());
    EXPECT_EQ(r.rank, 0);
    EXPECT_DOUBLE_EQ(r.time, 1795315561.4416955);
    EXPECT_EQ(r.world_size, 1);
    EXPECT_EQ(r.tp, 0);
    EXPECT_EQ(r.pp, 0);
    EXPECT_EQ(r.dp, 0);
    EXPECT_EQ(r.steps_total, 20);
    EXPECT_DOUBLE_EQ(r.peak_tflops, 0.1);
    EXPECT_TRUE(r.data.starts_with("synthetic: seed 1234"));
    EXPECT_EQ(r.run_dir, "runs/20261122-024601-6977");
    EXPECT_FALSE(r.resumed_from.has_value());
    ASSERT_TRUE(r.has_memory);
    EXPECT_EQ(r.memory[MEM_PARAMS].current, 882176);
    EXPECT_EQ(r.memory[MEM_GRADS].peak, 882176);
    EXPECT_EQ(r.memory[MEM_OPTIMIZER].current, 1764352);
    EXPECT_EQ(r.memory[MEM_ACTIVATIONS].predicted.value_or(-1), 2828288);
    EXPECT_FALSE(r.memory[MEM_COMMUNICATION].predicted.has_value());
    EXPECT_EQ(r.memory[MEM_WORKSPACE].current, 559104);
    EXPECT_FALSE(r.memory[MEM_WORKSPACE].predicted.has_value());
    EXPECT_EQ(r.memory[MEM_TOTAL].current, 6916096);
    EXPECT_EQ(r.memory[MEM_TOTAL].predicted.value_or(-1), 6356992);
}

TEST(MetricsEvent, StepLineEveryField) {
    const MetricRecord r = parsed(kStep, MetricKind::step);
    EXPECT_EQ(r.step, 1);
    EXPECT_EQ(r.tp, 0);
    EXPECT_DOUBLE_EQ(r.loss, 5.57439889293164);
    EXPECT_DOUBLE_EQ(r.lr, 0.001);
    EXPECT_DOUBLE_EQ(r.grad_norm, 1.1045378255795277);
    EXPECT_TRUE(r.clipped);
    EXPECT_EQ(r.tokens, 512);
    EXPECT_DOUBLE_EQ(r.tokens_per_s, 25811.70372217371);
    EXPECT_DOUBLE_EQ(r.tflops, 0.03806090584056847);
    EXPECT_DOUBLE_EQ(r.mfu, 0.38060905840568465);
    // `time` of a step is the breakdown object, not a timestamp.
    EXPECT_EQ(r.time, 0);
    EXPECT_DOUBLE_EQ(r.times.step, 0.019835963);
    EXPECT_DOUBLE_EQ(r.times.compute, 0.019366558);
    EXPECT_DOUBLE_EQ(r.times.dp_comm, 1.032e-06);
    EXPECT_DOUBLE_EQ(r.times.optimizer, 0.000468373);
    EXPECT_EQ(r.times.tp_comm, 0);
    EXPECT_EQ(r.times.pp_comm, 0);
    EXPECT_EQ(r.times.pipeline_idle, 0);
    ASSERT_TRUE(r.has_memory);
    EXPECT_EQ(r.memory[MEM_TOTAL].peak, 6950912);
    EXPECT_EQ(r.memory[MEM_WORKSPACE].peak, 593920);

    auto r2 = parse_metrics_line(kStep2);
    ASSERT_TRUE(r2.has_value());
    EXPECT_EQ(r2->step, 2);
    EXPECT_DOUBLE_EQ(r2->loss, 5.44452871568501);
}

TEST(MetricsEvent, CheckpointErrorEndWarning) {
    auto c = parse_metrics_line(kCheckpoint);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->kind, MetricKind::checkpoint);
    EXPECT_EQ(c->step, 1);
    EXPECT_EQ(c->dir, "/tmp/eng/run/checkpoints/step-00000001");
    EXPECT_EQ(c->bytes, 2646763);
    EXPECT_DOUBLE_EQ(c->seconds, 0.018357675);
    EXPECT_EQ(c->sha256, "599acf004af8d3702eb7541807982c3c42b271274ade61fb6a263c0676ea0046");
    EXPECT_DOUBLE_EQ(c->time, 1795315565.3086796);

    auto e = parse_metrics_line(kError);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->kind, MetricKind::error);
    EXPECT_TRUE(e->message.starts_with("--resume: no complete checkpoint")) << e->message;
    EXPECT_EQ(e->run_id, "20261122-024605-7008");

    auto end = parse_metrics_line(kEnd);
    ASSERT_TRUE(end.has_value());
    EXPECT_EQ(end->kind, MetricKind::end);
    EXPECT_EQ(end->step, 2);
    EXPECT_EQ(end->steps_run, 2);
    EXPECT_DOUBLE_EQ(end->seconds, 0.037460452);
    EXPECT_TRUE(end->has_memory);
    EXPECT_DOUBLE_EQ(end->time, 1795315561.4793067);

    // The engine's goodbye warning (trainer.cpp), as metrics.md describes it.
    auto w = parse_metrics_line(
        R"({"event":"warning","message":"not every rank said goodbye within 30 s after the last step; closing the store anyway","rank":3,"run_id":"r","schema":"ptd.metrics/1","time":1.5})");
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(w->kind, MetricKind::warning);
    EXPECT_EQ(w->rank, 3);
    EXPECT_TRUE(w->message.starts_with("not every rank"));

    auto resumed = parse_metrics_line(replace(kStart, R"("resumed_from":null)", R"("resumed_from":40)"));
    ASSERT_TRUE(resumed.has_value());
    EXPECT_EQ(resumed->resumed_from.value_or(-1), 40);
}

TEST(MetricsEvent, Names) {
    EXPECT_STREQ(metric_kind_name(MetricKind::checkpoint), "checkpoint");
    EXPECT_STREQ(metric_kind_name(MetricKind::end), "end");
    EXPECT_STREQ(mem_cat_name(MEM_COMMUNICATION), "communication");
    EXPECT_STREQ(mem_cat_name(MEM_TOTAL), "total");
}

TEST(MetricsEvent, PlainTextIsNotAProblem) {
    for (const std::string& line : {std::string("ptd-engine: rank 0: step 1/20 | loss 5.5744"), std::string(""),
                                   std::string("   "), std::string("\r"), std::string("[1, 2, 3]"),
                                   std::string("Traceback (most recent call last):"), std::string("\x01\x02\xff", 3)}) {
        std::string problem = "stale";
        EXPECT_FALSE(parse_metrics_line(line, &problem).has_value()) << line;
        EXPECT_EQ(problem, "") << line;
    }
    EXPECT_FALSE(parse_metrics_line("hello").has_value());  // no problem pointer: fine too
}

TEST(MetricsEvent, ToleratesLineEndingsAndExtraFields) {
    EXPECT_TRUE(parse_metrics_line(kStep + "\r").has_value());
    EXPECT_TRUE(parse_metrics_line("  " + kStep + "\n").has_value());
    // Fields added by later engines are ignored, at the top and inside known objects.
    std::string extra = replace(kStep, R"("event":"step",)",
                                R"("event":"step","future":{"nested":[1,{"x":null}]},"gpu_util":0.93,)");
    extra = replace(extra, R"("tp_comm":0.0})", R"("tp_comm":0.0,"cp_comm":0.5})");
    extra = replace(extra, R"("total":{)", R"("host_pinned":{"current":"odd"},"total":{"unit":"bytes",)");
    std::string problem;
    auto r = parse_metrics_line(extra, &problem);
    ASSERT_TRUE(r.has_value()) << problem;
    EXPECT_DOUBLE_EQ(r->loss, 5.57439889293164);
    EXPECT_EQ(r->memory[MEM_TOTAL].current, 6916096);
    // An integral float where an integer belongs is fine (other writers print 3.0).
    auto f = parse_metrics_line(replace(kStep, R"("step":1,)", R"("step":3.0,)"));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->step, 3);
    // Memory is optional: without it the record says so.
    auto nomem = parse_metrics_line(R"({"schema":"ptd.metrics/1","event":"step","rank":0,"step":1,"loss":2.5})");
    ASSERT_TRUE(nomem.has_value());
    EXPECT_FALSE(nomem->has_memory);
}

TEST(MetricsEvent, BrokenJson) {
    EXPECT_TRUE(contains(rejected("{not json"), "not valid JSON"));
    EXPECT_TRUE(contains(rejected(kStep.substr(0, kStep.size() / 2)), "not valid JSON"));
    EXPECT_TRUE(contains(rejected(kStep.substr(0, kStep.size() - 1)), "not valid JSON"));
    EXPECT_TRUE(contains(rejected("{"), "not valid JSON"));
    EXPECT_TRUE(contains(rejected(kStep + "}"), "not valid JSON"));
    EXPECT_TRUE(contains(rejected(kStep + kStep), "not valid JSON"));  // two lines glued
    // Invalid UTF-8 inside a string.
    EXPECT_TRUE(contains(rejected(replace(kError, "--resume", "\xff\xfe")), "not valid JSON"));
}

TEST(MetricsEvent, SchemaAndEvent) {
    std::string p = rejected(replace(kStep, "ptd.metrics/1", "ptd.metrics/2"));
    EXPECT_TRUE(contains(p, "field \"schema\"")) << p;
    EXPECT_TRUE(contains(p, "ptd.metrics/2")) << p;
    EXPECT_TRUE(contains(p, "expected \"ptd.metrics/1\"")) << p;
    p = rejected(R"({"event":"step","rank":0,"step":1,"loss":2})");
    EXPECT_TRUE(contains(p, "field \"schema\" is missing")) << p;
    p = rejected(R"({"schema":1,"event":"step"})");
    EXPECT_TRUE(contains(p, "field \"schema\" is 1")) << p;
    p = rejected(replace(kStep, R"("event":"step")", R"("event":"teleport")"));
    EXPECT_TRUE(contains(p, "field \"event\"")) << p;
    EXPECT_TRUE(contains(p, "teleport")) << p;
    EXPECT_TRUE(contains(p, "start, step, checkpoint, warning, error, end or probe")) << p;
    p = rejected(replace(kStep, R"("event":"step",)", ""));
    EXPECT_TRUE(contains(p, "field \"event\" is missing")) << p;
    p = rejected("{}");
    EXPECT_TRUE(contains(p, "schema")) << p;
}

TEST(MetricsEvent, WrongFieldTypesNameTheField) {
    struct Case {
        std::string line, expect;
    } cases[] = {
        {replace(kStep, R"("loss":5.57439889293164)", R"("loss":"abc")"), R"(field "loss" is a string ("abc"), expected a number)"},
        {replace(kStep, R"("loss":5.57439889293164,)", ""), R"(field "loss" is missing, expected a number)"},
        {replace(kStep, R"("rank":0)", R"("rank":1.5)"), R"(field "rank" is 1.5, expected an integer)"},
        {replace(kStep, R"("rank":0)", R"("rank":-2)"), R"(field "rank" is -2, expected an integer in 0..)"},
        {replace(kStep, R"("step":1,)", R"("step":null,)"), R"(field "step" is null, expected an integer)"},
        {replace(kStep, R"("clipped":true)", R"("clipped":"yes")"), R"(field "clipped" is a string ("yes"), expected true or false)"},
        {replace(kStep, R"("coords":{"dp":0,"pp":0,"tp":0})", R"("coords":{"dp":0,"pp":0,"tp":"x"})"), R"(field "coords.tp" is a string ("x"))"},
        {replace(kStep, R"("coords":{"dp":0,"pp":0,"tp":0})", R"("coords":[0,0,0])"), R"(field "coords" is an array, expected an object)"},
        {replace(kStep, R"("total":{"current":6916096)", R"("total":{"current":"6916096")"), R"(field "memory.total.current" is a string)"},
        {replace(kStep, R"("total":{"current":6916096,)", R"("total":{)"), R"(field "memory.total.current" is missing)"},
        {replace(kStep, R"("predicted":6356992.0})", R"("predicted":true})"), R"(field "memory.total.predicted" is true, expected a number)"},
        {replace(kStep, R"("memory":{)", R"("memory":7,"x":{)"), R"(field "memory" is 7, expected an object)"},
        {replace(kStep, R"("time":{)", R"("time":5,"x":{)"), R"(field "time" is 5, expected an object)"},
        {replace(kStep, R"("dp_comm":1.032e-06)", R"("dp_comm":[1])"), R"(field "time.dp_comm" is an array, expected a number)"},
        {replace(kStart, R"("world_size":1)", R"("world_size":0)"), R"(field "world_size" is 0, expected an integer in 1..)"},
        {replace(kStart, R"("resumed_from":null)", R"("resumed_from":"x")"), R"(field "resumed_from" is a string)"},
        {replace(kEnd, R"("time":1795315561.4793067)", R"("time":"now")"), R"(field "time" is a string ("now"), expected a number)"},
        {replace(kError, R"("message":)", R"("message":{},"x":)"), R"(field "message" is an object, expected a string)"},
        {replace(kCheckpoint, R"("dir":)", R"("dir":42,"x":)"), R"(field "dir" is 42, expected a string)"},
        {replace(kCheckpoint, R"("run_id":"20261122-024605-7001")", R"("run_id":["a"])"), R"(field "run_id" is an array)"},
    };
    for (const Case& c : cases) {
        const std::string p = rejected(c.line);
        EXPECT_TRUE(contains(p, c.expect)) << "got: " << p << "\nexpected: " << c.expect;
    }
    // Long strings are shortened in the message.
    const std::string p = rejected(replace(kStep, R"("loss":5.57439889293164)", "\"loss\":\"" + std::string(500, 'z') + "\""));
    EXPECT_LT(p.size(), 150u) << p;
}

TEST(MetricsEvent, HugeNumbers) {
    struct Case {
        std::string line, expect;
    } cases[] = {
        {replace(kStep, R"("step":1,)", R"("step":1e300,)"), R"(field "step" is 1e+300, expected an integer in 0..2147483647)"},
        {replace(kStep, R"("step":1,)", R"("step":99999999999999999999999,)"), R"(field "step")"},
        {replace(kStep, R"("step":1,)", R"("step":18446744073709551615,)"), R"(field "step" is 18446744073709551615)"},
        {replace(kStep, R"("rank":0)", R"("rank":4294967296)"), R"(field "rank" is 4294967296)"},
        {replace(kStep, R"("rank":0)", R"("rank":-9223372036854775808)"), R"(field "rank")"},
        {replace(kStep, R"("loss":5.57439889293164)", R"("loss":1e999)"), "not valid JSON"},  // overflows a double
        {replace(kStep, R"("loss":5.57439889293164)", R"("loss":NaN)"), "not valid JSON"},
    };
    for (const Case& c : cases) {
        const std::string p = rejected(c.line);
        EXPECT_TRUE(contains(p, c.expect)) << "got: " << p << "\nexpected: " << c.expect;
    }
    // Huge but finite doubles are numbers like any other.
    auto r = parse_metrics_line(replace(kStep, R"("tokens":512.0)", R"("tokens":1e300)"));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->tokens, 1e300);
}

TEST(MetricsEvent, GarbageNeverThrows) {
    // Deep nesting is refused before parsing (a recursive reader would overflow the stack).
    EXPECT_TRUE(contains(rejected("{\"a\":" + std::string(200000, '[')), "nested deeper"));
    EXPECT_TRUE(contains(rejected("{" + std::string(100000, '{')), "nested deeper"));
    // Binary garbage that starts like JSON.
    const std::string bin("{\x00\xff\xfe\x80garbage\x1b[31m\x00}", 18);
    EXPECT_FALSE(rejected(bin).empty());
    EXPECT_FALSE(rejected(std::string("{\"schema\":\"ptd.metrics/1\"\x00,\"event\":\"step\"}", 40)).empty());

    // Every prefix and many byte flips of real lines, and random bytes: no throw, no crash,
    // and a rejection always carries a reason once the line starts with '{'.
    std::mt19937 rng(1234);
    for (const std::string& line : {kStart, kStep, kCheckpoint, kError, kEnd}) {
        for (size_t n = 0; n < line.size(); ++n) {
            std::string problem;
            auto r = parse_metrics_line(std::string_view(line).substr(0, n), &problem);
            EXPECT_FALSE(r.has_value());
            if (n > 0) {
                EXPECT_FALSE(problem.empty()) << n;
            }
        }
        for (int i = 0; i < 2000; ++i) {
            std::string m = line;
            for (int k = 0; k < 3; ++k) m[1 + rng() % (m.size() - 1)] = (char)(rng() % 256);
            std::string problem;
            auto r = parse_metrics_line(m, &problem);
            if (!r) {
                EXPECT_FALSE(problem.empty()) << m;
            }
        }
    }
    for (int i = 0; i < 5000; ++i) {
        std::string s(rng() % 200, '\0');
        for (char& c : s) c = (char)(rng() % 256);
        if (i % 2 == 0) s.insert(0, "{");
        std::string problem;
        (void)parse_metrics_line(s, &problem);
    }
}

// `ptd-engine --probe` lines (rank 7 of the shipped 8-rank job, run 20261129-063030-21168).
namespace {
const std::string kProbeHost =
    R"j({"backend":"cpu","blas":{"check":"passed","chosen_by":"user (OPENBLAS_CORETYPE)","core":"Haswell","cpu_isa":"avx512_bf16","library":"OpenBLAS 0.3.21","openblas_default":null},"cores":2,"cpu_model":"AMD EPYC","cpu_quota":0,"cpus":[0,1],"device":{"backend":"cpu","fallback":null,"ordinal":null,"requested":"auto","source":null},"engine_version":"0.1.0","event":"probe","gpu":null,"hostname":"vm","kind":"host","local_rank":7,"memory_bytes":25276510208,"node":0,"precision":"fp32","quick":false,"rank":7,"run_id":"20261129-063030-21168","schema":"ptd.metrics/1","threads":1,"time":1795933830.8393638})j";
const std::string kProbePlan =
    R"({"event":"probe","expected_s":0.28688461824,"kind":"plan","probes":91,"rank":7,"repeats":9,"run_id":"20261129-063030-21168","schema":"ptd.metrics/1","time":1795933830.8395922,"warmup":2})";
const std::string kProbeGemm =
    R"({"dtype":"f32","event":"probe","flops":1572864.0,"kind":"gemm","median_s":1.5013e-05,"name":"qkv.fwd","rank":7,"repeats":9,"run_id":"20261129-063030-21168","schema":"ptd.metrics/1","shape":[128,96,64],"spread":0.023379737560780694,"tflops":0.10476680210484247,"time":1795933830.839801})";
const std::string kProbeComm =
    R"({"algbw_gbps":0.012327843590484446,"bus_factor":1.0,"busbw_gbps":0.012327843590484446,"bytes":4096,"event":"probe","group":"tp","group_size":2,"kind":"comm","median_s":0.000332256,"members_per_node":2,"name":"all_reduce","nodes":1,"rank":7,"repeats":9,"run_id":"20261129-063030-21168","schema":"ptd.metrics/1","spread":0.7462589087932195,"time":1795933831.7638538})";
// dpwait: a step-long burst of a DP pair (probe.cpp step_bursts), as the engine writes it.
const std::string kProbeBurst =
    R"({"dtype":"f32","event":"probe","group":"dp","group_size":2,"kind":"layer","mean_s":0.0265,"median_s":0.0269,"micro_batches":4,"name":"step.compute.dp_max","rank":7,"repeats":30,"run_id":"20261130-095301-6306","schema":"ptd.metrics/1","shape":[2,64,64,4,4,256,1,1,1],"spread":0.07,"time":1796036000.5})";
const std::string kProbeDone =
    R"({"event":"probe","kind":"done","probes":91,"rank":7,"run_id":"20261129-063030-21168","schema":"ptd.metrics/1","seconds":9.749631644,"time":1795933840.5891109})";

ptd::ProbeRecord probe_of(const std::string& line) {
    std::string problem;
    auto r = parse_metrics_line(line, &problem);
    EXPECT_TRUE(r.has_value()) << problem;
    if (!r) return {};
    EXPECT_EQ(r->kind, MetricKind::probe);
    EXPECT_EQ(r->rank, 7);
    return r->probe;
}
}  // namespace

TEST(MetricsEvent, ProbeLinesEveryKind) {
    const auto host = probe_of(kProbeHost);
    EXPECT_EQ(host.kind, "host");
    EXPECT_EQ(host.hostname, "vm");
    EXPECT_EQ(host.cpu_model, "AMD EPYC");
    EXPECT_EQ(host.blas_core, "Haswell");
    EXPECT_EQ(host.cores, 2);
    EXPECT_EQ(host.cpus, (std::vector<int>{0, 1}));
    EXPECT_EQ(host.cpu_quota, 0);
    EXPECT_EQ(host.local_rank, 7);
    // An engine from before the mask was reported: no cpus, no quota.
    const auto older = probe_of(replace(kProbeHost, R"("cpu_quota":0,"cpus":[0,1],)", ""));
    EXPECT_TRUE(older.cpus.empty());
    EXPECT_EQ(host.device, "");  // "gpu": null on the CPU backend
    const auto plan = probe_of(kProbePlan);
    EXPECT_EQ(plan.probes, 91);
    EXPECT_EQ(plan.warmup, 2);
    EXPECT_EQ(plan.repeats, 9);
    EXPECT_DOUBLE_EQ(plan.expected_s, 0.28688461824);
    const auto gemm = probe_of(kProbeGemm);
    EXPECT_EQ(gemm.name, "qkv.fwd");
    EXPECT_EQ(gemm.shape, (std::vector<long long>{128, 96, 64}));
    EXPECT_DOUBLE_EQ(gemm.median_s, 1.5013e-05);
    EXPECT_EQ(gemm.repeats, 9);
    const auto comm = probe_of(kProbeComm);
    EXPECT_EQ(comm.group, "tp");
    EXPECT_EQ(comm.group_size, 2);
    EXPECT_EQ(comm.members_per_node, 2);
    EXPECT_DOUBLE_EQ(comm.bytes, 4096);
    const auto burst = probe_of(kProbeBurst);
    EXPECT_EQ(burst.name, "step.compute.dp_max");
    EXPECT_EQ(burst.group, "dp");
    EXPECT_EQ(burst.group_size, 2);
    EXPECT_EQ(burst.micro_batches, 4);
    const auto done = probe_of(kProbeDone);
    EXPECT_EQ(done.probes, 91);
    EXPECT_DOUBLE_EQ(done.seconds, 9.749631644);
}

TEST(MetricsEvent, ProbeFieldsAreChecked) {
    struct Case {
        std::string line, expect;
    } cases[] = {
        {replace(kProbeGemm, R"("kind":"gemm")", R"("kind":"gemv")"), R"(field "kind" is a string ("gemv"), expected host, plan, gemm)"},
        {replace(kProbeGemm, R"("kind":"gemm",)", ""), R"(field "kind" is missing)"},
        {replace(kProbeGemm, R"("median_s":1.5013e-05,)", ""), R"(field "median_s" is missing, expected a number)"},
        {replace(kProbeGemm, R"("repeats":9)", R"("repeats":0)"), R"(field "repeats" is 0, expected an integer in 1..)"},
        {replace(kProbeGemm, R"("shape":[128,96,64])", R"("shape":[128,96])"), R"(field "shape" is an array, expected [M, N, K])"},
        {replace(kProbeGemm, R"("shape":[128,96,64])", R"("shape":[128,0,64])"), R"(field "shape" is an array, expected [M, N, K])"},
        {replace(kProbeGemm, R"("flops":1572864.0,)", ""), R"(field "flops" is missing)"},
        {replace(replace(kProbeGemm, R"("kind":"gemm")", R"("kind":"attention")"), R"("shape":[128,96,64])", R"("shape":[2,2,64])"),
         R"(field "shape" is an array, expected [B, H, T, D])"},
        {replace(kProbeComm, R"("group_size":2)", R"("group_size":1)"), R"(field "group_size" is 1, expected an integer in 2..)"},
        {replace(kProbeHost, R"("cpus":[0,1])", R"("cpus":"0-1")"),
         R"(field "cpus" is a string ("0-1"), expected an array of distinct CPU ids, each an integer in 0..1023)"},
        {replace(kProbeHost, R"("cpus":[0,1])", R"("cpus":[0,0])"), R"(field "cpus" is an array, expected an array of distinct CPU ids)"},
        {replace(kProbeHost, R"("cpus":[0,1])", R"("cpus":[0,1024])"), R"(field "cpus" is an array, expected an array of distinct CPU ids)"},
        {replace(kProbeHost, R"("cpu_quota":0)", R"("cpu_quota":-2)"), R"(field "cpu_quota" is -2, expected an integer in 0..)"},
        {replace(kProbeComm, R"("group":"tp",)", ""), R"(field "group" is missing, expected a string)"},
        {replace(kProbeComm, R"("bytes":4096,)", ""), R"(field "bytes" is missing, expected a number)"},
        {replace(kProbeBurst, R"("micro_batches":4,)", ""), R"(field "micro_batches" is missing, expected an integer in 1..)"},
        {replace(kProbeBurst, R"("group":"dp")", R"("group":"tp")"), R"(field "group" is "tp", expected "dp" (a step burst's group))"},
        {replace(kProbeBurst, R"("group_size":2)", R"("group_size":1)"), R"(field "group_size" is 1, expected an integer in 2..)"},
        {replace(kProbeHost, R"("hostname":"vm",)", ""), R"(field "hostname" is missing)"},
        {replace(kProbeHost, R"("gpu":null)", R"("gpu":3)"), R"(field "gpu" is 3, expected a string)"},
        {replace(kProbePlan, R"("expected_s":0.28688461824,)", ""), R"(field "expected_s" is missing)"},
        {replace(kProbeDone, R"("seconds":9.749631644,)", ""), R"(field "seconds" is missing)"},
    };
    for (const Case& c : cases) {
        const std::string p = rejected(c.line);
        EXPECT_TRUE(contains(p, c.expect)) << "got: " << p << "\nexpected: " << c.expect;
    }
}
