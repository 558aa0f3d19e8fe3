// engine_comm_worker.cpp — one rank of a multi-process communication test
// (test_engine_comm spawns one per rank). It sets up a run the way ptd-engine does
// (torchrun environment, rank 0's KV store, a monitor on every rank, Gloo groups for a
// TP×PP×DP layout) and then either checks every Communicator operation exactly
// (--mode check) or stages a failure for the others to detect: a killed rank (die),
// a stopped one (stall) or one that reports its own error (error). --mode misorder and
// miscount (world of 2) break the point-to-point contract on purpose: rank 0 posts two
// sends in the wrong order, or one of the wrong size; rank 1 prints what it received, so
// a test can see that strict mode (PTD_COMM_STRICT_FIFO=1) catches what plain FIFO
// matching would deliver silently.
//
//   engine_comm_worker --tp 2 --pp 2 --dp 2 [--mode check|die|stall|error|misorder|miscount]
//                      [--victim R] [--after S] [--timeout S] [--stall-timeout S]
//                      [--heartbeat S] [--store-lease S] [--how kill|exit] [--no-monitor 1]
//                      [--on-abort exit|record]
//
// Exit: 0 after "ok" (check), 1 from fatal_run_error, 2 on bad usage / setup, 3 when a
// failure mode ran to its end without the run being aborted.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ptd/engine/comm.h"
#include "ptd/engine/dtype.h"
#include "ptd/engine/failure.h"
#include "ptd/engine/kv_store.h"
#include "ptd/layout/layout.h"
#include "ptd/rank_env.h"

using namespace ptd;
using namespace ptd::engine;

namespace {

struct Args {
    int tp = 1, pp = 1, dp = 1;
    std::string mode = "check";
    int victim = 1;
    double after = 1.0;
    double timeout = 30;
    double stall_timeout = 30;
    double heartbeat = 0.25;
    double store_lease = 0;  // > 0: stop when the store echoes nothing this long (as ptd-engine does)
    std::string how = "kill";
    bool no_monitor = false;
    bool abort_exits = true;
    std::string pair_secret;   // CommOptions::pair_secret: every Gloo pair proves it
    int impostor = -1;         // this rank proves another secret: a stranger that took a pair's place
    std::string listen_host;   // CommOptions::hostname: the address the Gloo pairs listen on
};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr, "engine_comm_worker: %s\n", why.c_str());
    std::exit(2);
}

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        if (i + 1 >= argc) usage("missing value after " + k);
        std::string v = argv[++i];
        if (k == "--tp") a.tp = std::atoi(v.c_str());
        else if (k == "--pp") a.pp = std::atoi(v.c_str());
        else if (k == "--dp") a.dp = std::atoi(v.c_str());
        else if (k == "--mode") a.mode = v;
        else if (k == "--victim") a.victim = std::atoi(v.c_str());
        else if (k == "--after") a.after = std::atof(v.c_str());
        else if (k == "--timeout") a.timeout = std::atof(v.c_str());
        else if (k == "--stall-timeout") a.stall_timeout = std::atof(v.c_str());
        else if (k == "--heartbeat") a.heartbeat = std::atof(v.c_str());
        else if (k == "--store-lease") a.store_lease = std::atof(v.c_str());
        else if (k == "--how") a.how = v;
        else if (k == "--no-monitor") a.no_monitor = v == "1";
        else if (k == "--on-abort") a.abort_exits = v != "record";
        else if (k == "--pair-secret") a.pair_secret = v;
        else if (k == "--impostor") a.impostor = std::atoi(v.c_str());
        else if (k == "--listen-host") a.listen_host = v;
        else usage("unknown flag " + k);
    }
    if (a.mode != "check" && a.mode != "die" && a.mode != "stall" && a.mode != "error" && a.mode != "misorder" &&
        a.mode != "miscount")
        usage("--mode must be check, die, stall, error, misorder or miscount");
    return a;
}

int g_rank = 0;

// A wrong value is a test failure: say exactly which, and fail the whole run.
void expect_eq(double got, double want, const Communicator& c, const char* op, size_t i) {
    if (got == want) return;
    char buf[256];
    std::snprintf(buf, sizeof buf, "check failed: %s %s element %zu: got %.9g, expected %.9g", c.name().c_str(), op, i,
                  got, want);
    fatal_run_error(buf);
}

// Storage bits of small integers in bf16 / f16 (exact in both up to 256): dtype.h's
// conversions, under short names.
uint16_t bf16_bits(float f) { return f32_to_bf16_bits(f); }
float bf16_value(uint16_t h) { return bf16_bits_to_f32(h); }
uint16_t f16_bits(float f) { return f32_to_f16_bits(f); }
float f16_value(uint16_t h) { return f16_bits_to_f32(h); }

void check_group(Communicator& c) {
    const int p = c.size(), r = c.rank();
    const auto& g = c.global_ranks();
    const int me = g[(size_t)r];

    // all-reduce sum / max on small integers: exact in every dtype whatever the order.
    const size_t n = 1000;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = (float)((me + 1) * (int)(i % 7 + 1));
    c.all_reduce_sum(x.data(), (int64_t)n);
    for (size_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : g) want += (m + 1) * (int)(i % 7 + 1);
        expect_eq(x[i], want, c, "all_reduce f32 sum", i);
    }
    for (size_t i = 0; i < n; ++i) x[i] = (float)(me * 3 + (int)(i % 5)) * ((i & 1) ? -1.f : 1.f);
    c.all_reduce_max(x.data(), (int64_t)n);
    for (size_t i = 0; i < n; ++i) {
        double want = -1e30;
        for (int m : g) want = std::max(want, (double)(m * 3 + (int)(i % 5)) * ((i & 1) ? -1 : 1));
        expect_eq(x[i], want, c, "all_reduce f32 max", i);
    }
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i) d[i] = (me + 1) * 0.5 + (double)i * 0.25;
    c.all_reduce(d.data(), (int64_t)n, DType::f64, ReduceOp::sum);
    for (size_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : g) want += (m + 1) * 0.5 + (double)i * 0.25;
        expect_eq(d[i], want, c, "all_reduce f64 sum", i);
    }
    std::vector<int32_t> ints(n);
    for (size_t i = 0; i < n; ++i) ints[i] = (me + 1) * 100000 + (int)i;
    c.all_reduce(ints.data(), (int64_t)n, DType::i32, ReduceOp::sum);
    for (size_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : g) want += (m + 1) * 100000 + (int)i;
        expect_eq(ints[i], want, c, "all_reduce i32 sum", i);
    }
    for (size_t i = 0; i < n; ++i) ints[i] = (i & 1) ? -me : me * 7 - (int)i;
    c.all_reduce(ints.data(), (int64_t)n, DType::i32, ReduceOp::max);
    for (size_t i = 0; i < n; ++i) {
        double want = -1e30;
        for (int m : g) want = std::max(want, (double)((i & 1) ? -m : m * 7 - (int)i));
        expect_eq(ints[i], want, c, "all_reduce i32 max", i);
    }
    // 2-byte types: sums of small integers are exact, so the storage must be too.
    for (DType t : {DType::bf16, DType::f16}) {
        auto bits = t == DType::bf16 ? bf16_bits : f16_bits;
        auto value = t == DType::bf16 ? bf16_value : f16_value;
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = bits((float)((me + 1) * (int)(i % 5 + 1)) * ((i & 2) ? -1.f : 1.f));
        c.all_reduce(h.data(), (int64_t)n, t, ReduceOp::sum);
        for (size_t i = 0; i < n; ++i) {
            double want = 0;
            for (int m : g) want += (m + 1) * (int)(i % 5 + 1) * ((i & 2) ? -1 : 1);
            expect_eq(value(h[i]), want, c, t == DType::bf16 ? "all_reduce bf16 sum" : "all_reduce f16 sum", i);
        }
        for (size_t i = 0; i < n; ++i) h[i] = bits((float)(me * 3 - (int)(i % 9)));
        c.all_reduce(h.data(), (int64_t)n, t, ReduceOp::max);
        for (size_t i = 0; i < n; ++i) {
            double want = -1e30;
            for (int m : g) want = std::max(want, (double)(m * 3 - (int)(i % 9)));
            expect_eq(value(h[i]), want, c, t == DType::bf16 ? "all_reduce bf16 max" : "all_reduce f16 max", i);
        }
    }
    // bf16 rounding is to nearest even in f32 arithmetic: 1 + 1/256 is not a bf16 value
    // (it lies halfway between 1 and 1 + 1/128), so two ranks' 0.5 + 0.50390625 round to
    // 1 (even), and 0.5 + 0.51171875 = 1.01171875 rounds up to 1.015625.
    if (p == 2) {
        std::vector<uint16_t> h = {bf16_bits(r == 0 ? 0.5f : 0.50390625f), bf16_bits(r == 0 ? 0.5f : 0.51171875f)};
        c.all_reduce(h.data(), 2, DType::bf16, ReduceOp::sum);
        expect_eq(bf16_value(h[0]), 1.0, c, "all_reduce bf16 round to even", 0);
        expect_eq(bf16_value(h[1]), 1.015625, c, "all_reduce bf16 round to even", 1);
    }

    // Inexact values (large enough for several ring segments): every member must still
    // end with the same bits. Compare against the root's result, broadcast.
    const size_t big = 300000;
    std::vector<float> y(big), root_copy(big);
    for (size_t i = 0; i < big; ++i) y[i] = std::sin((float)(me + 1) * 0.37f + (float)i * 1e-3f) / 3.0f;
    c.all_reduce_sum(y.data(), (int64_t)big);
    root_copy = y;
    c.broadcast(root_copy.data(), (int64_t)big, DType::f32, 0);
    if (std::memcmp(root_copy.data(), y.data(), big * sizeof(float)) != 0)
        fatal_run_error("check failed: " + c.name() + " all_reduce f32 sum results differ between members");

    // Reduce-scatter and all-gather: equal counts (NCCL's contract), several dtypes.
    const int64_t each = 3 + 5 * p, total = each * p, my_off = each * r;
    std::vector<float> rs((size_t)total);
    for (int64_t j = 0; j < total; ++j) rs[(size_t)j] = (float)((me + 1) * (j + 1));
    c.reduce_scatter(rs.data(), each, DType::f32, ReduceOp::sum);
    for (int64_t j = my_off; j < my_off + each; ++j) {
        double want = 0;
        for (int m : g) want += (m + 1) * (j + 1);
        expect_eq(rs[(size_t)j], want, c, "reduce_scatter f32 sum", (size_t)j);
    }
    std::vector<double> rsd((size_t)total);
    for (int64_t j = 0; j < total; ++j) rsd[(size_t)j] = (double)(me * 2 - j);
    c.reduce_scatter(rsd.data(), each, DType::f64, ReduceOp::max);
    for (int64_t j = my_off; j < my_off + each; ++j) {
        double want = -1e30;
        for (int m : g) want = std::max(want, (double)(m * 2 - j));
        expect_eq(rsd[(size_t)j], want, c, "reduce_scatter f64 max", (size_t)j);
    }
    std::vector<uint16_t> rsb((size_t)total);
    for (int64_t j = 0; j < total; ++j) rsb[(size_t)j] = bf16_bits((float)((me + 1) * (j % 4 + 1)));
    c.reduce_scatter(rsb.data(), each, DType::bf16, ReduceOp::sum);
    for (int64_t j = my_off; j < my_off + each; ++j) {
        double want = 0;
        for (int m : g) want += (m + 1) * (j % 4 + 1);
        expect_eq(bf16_value(rsb[(size_t)j]), want, c, "reduce_scatter bf16 sum", (size_t)j);
    }

    std::vector<float> ag((size_t)total, -1.f);
    for (int64_t j = 0; j < each; ++j) ag[(size_t)(my_off + j)] = (float)(me * 1000 + j);
    c.all_gather(ag.data(), each, DType::f32);
    for (int k = 0; k < p; ++k)
        for (int64_t j = 0; j < each; ++j)
            expect_eq(ag[(size_t)(k * each + j)], g[(size_t)k] * 1000 + j, c, "all_gather f32", (size_t)(k * each + j));
    std::vector<uint16_t> agh((size_t)total, 0xffff);
    for (int64_t j = 0; j < each; ++j) agh[(size_t)(my_off + j)] = (uint16_t)(me * 100 + j);
    c.all_gather(agh.data(), each, DType::f16);  // bits travel untouched
    for (int k = 0; k < p; ++k)
        for (int64_t j = 0; j < each; ++j)
            expect_eq(agh[(size_t)(k * each + j)], g[(size_t)k] * 100 + j, c, "all_gather f16", (size_t)(k * each + j));

    for (int root = 0; root < p; ++root) {
        std::vector<float> b(77, -1.f);
        if (r == root)
            for (size_t i = 0; i < b.size(); ++i) b[i] = (float)(g[(size_t)root] * 10 + (int)i);
        c.broadcast(b.data(), (int64_t)b.size(), DType::f32, root);
        for (size_t i = 0; i < b.size(); ++i) expect_eq(b[i], g[(size_t)root] * 10 + (int)i, c, "broadcast f32", i);
        std::vector<double> bd(5, -1.0);
        if (r == root)
            for (size_t i = 0; i < bd.size(); ++i) bd[i] = g[(size_t)root] + 0.125 * (double)i;
        c.broadcast(bd.data(), (int64_t)bd.size(), DType::f64, root);
        for (size_t i = 0; i < bd.size(); ++i) expect_eq(bd[i], g[(size_t)root] + 0.125 * (double)i, c, "broadcast f64", i);
    }
    c.barrier();

    // Point-to-point without tags, in one group per round: every rank sends three messages
    // of different sizes to each neighbour and receives three from each. Under NCCL's
    // semantics (a send completes only when its receive is posted) only the group keeps
    // this from deadlocking; the messages of one direction arrive in the order sent.
    if (p > 1) {
        const int right = (r + 1) % p, left = (r + p - 1) % p;
        auto size_of = [](int k, int dir) { return (size_t)(40 + 17 * k + 5 * dir); };
        auto value_of = [](int src, int k, int dir, size_t i) { return (float)(src * 100000 + k * 1000 + dir * 500) + (float)i * 0.5f; };
        for (int round = 0; round < 2; ++round) {
            std::vector<std::vector<float>> out, in_left, in_right;
            out.reserve(6);
            c.group_start();
            for (int k = 0; k < 3; ++k) {
                // dir 0: to the right; dir 1: to the left (with p == 2 both are the same peer).
                for (int dir = 0; dir < 2; ++dir) {
                    std::vector<float> m(size_of(k, dir));
                    for (size_t i = 0; i < m.size(); ++i) m[i] = value_of(me, k, dir, i);
                    out.push_back(std::move(m));
                    c.send(out.back().data(), (int64_t)out.back().size(), DType::f32, dir == 0 ? right : left,
                           (uint32_t)(k * 2 + dir));
                }
            }
            in_left.reserve(3);
            in_right.reserve(3);
            for (int k = 0; k < 3; ++k) {
                in_left.emplace_back(size_of(k, 0), -7.f);   // what left sent to its right
                in_right.emplace_back(size_of(k, 1), -7.f);  // what right sent to its left
                if (p == 2) {
                    // One peer, one FIFO: its messages come in the order it posted them.
                    c.recv(in_left.back().data(), (int64_t)in_left.back().size(), DType::f32, left, (uint32_t)(k * 2));
                    c.recv(in_right.back().data(), (int64_t)in_right.back().size(), DType::f32, right, (uint32_t)(k * 2 + 1));
                } else {
                    c.recv(in_left.back().data(), (int64_t)in_left.back().size(), DType::f32, left, (uint32_t)(k * 2));
                }
            }
            if (p > 2)
                for (int k = 0; k < 3; ++k)
                    c.recv(in_right[(size_t)k].data(), (int64_t)in_right[(size_t)k].size(), DType::f32, right,
                           (uint32_t)(k * 2 + 1));
            c.group_end();
            for (int k = 0; k < 3; ++k) {
                for (size_t i = 0; i < in_left[(size_t)k].size(); ++i)
                    expect_eq(in_left[(size_t)k][i], value_of(g[(size_t)left], k, 0, i), c, "p2p recv from left", i);
                for (size_t i = 0; i < in_right[(size_t)k].size(); ++i)
                    expect_eq(in_right[(size_t)k][i], value_of(g[(size_t)right], k, 1, i), c, "p2p recv from right", i);
            }
        }
        // Ungrouped: a send is a group of its own. Even ranks send first, odd ranks
        // receive first, so the ring does not wait on itself.
        if (p % 2 == 0) {
            std::vector<float> one(9, (float)me), got(9, -1.f);
            for (int phase = 0; phase < 2; ++phase) {
                if ((r % 2 == 0) == (phase == 0)) c.send(one.data(), 9, DType::f32, right, 99);
                else c.recv(got.data(), 9, DType::f32, left, 99);
                if ((r % 2 == 0) != (phase == 0))
                    for (size_t i = 0; i < got.size(); ++i) expect_eq(got[i], g[(size_t)left], c, "ungrouped recv", i);
            }
        }
    }
}

// misorder / miscount: rank 0 sends A (check 1) and B (check 2), rank 1 expects them in
// that order. misorder posts B first; miscount sends A with one element too many.
void break_the_contract(Communicator& world, const std::string& mode) {
    std::vector<float> a(64, 1.f), b(64, 2.f);
    if (world.rank() == 0) {
        world.group_start();
        if (mode == "misorder") {
            world.send(b.data(), 64, DType::f32, 1, 2);
            world.send(a.data(), 64, DType::f32, 1, 1);
        } else {
            std::vector<float> longer(65, 1.f);
            world.send(longer.data(), 65, DType::f32, 1, 1);
            world.send(b.data(), 64, DType::f32, 1, 2);
            world.group_end();
            return;
        }
        world.group_end();
    } else if (world.rank() == 1) {
        std::vector<float> got_a(64, 0.f), got_b(64, 0.f);
        world.group_start();
        world.recv(got_a.data(), 64, DType::f32, 0, 1);
        world.recv(got_b.data(), 64, DType::f32, 0, 2);
        world.group_end();
        std::printf("A holds %g, B holds %g\n", got_a[0], got_b[0]);
        std::fflush(stdout);
    }
}

// The run's steady state for the failure modes: small world all-reduces, forever.
void all_reduce_loop(Communicator& world, double seconds) {
    std::vector<float> x(4096, 1.f);
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
        world.all_reduce_sum(x.data(), (int64_t)x.size());
        std::fill(x.begin(), x.end(), 1.f);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

}  // namespace

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv);
    auto env = read_rank_env();
    if (!env) {
        std::fprintf(stderr, "%s", env.error().str().c_str());
        return 2;
    }
    g_rank = env->rank;
    const int world = env->world_size;

    auto secret = run_secret_from_env(env->master_addr);
    if (!secret) {
        std::fprintf(stderr, "rank %d: %s", env->rank, secret.error().str().c_str());
        return 2;
    }
    std::unique_ptr<KvServer> server;
    if (env->rank == 0) {
        KvServerOptions so;
        so.bind_addr = env->master_addr;
        so.secret = *secret;
        so.port = env->master_port;
        so.world_size = world;
        so.stall_timeout_s = a.stall_timeout;
        auto s = KvServer::start(so);
        if (!s) {
            std::fprintf(stderr, "rank 0: %s", s.error().str().c_str());
            return 2;
        }
        server = std::move(*s);
    }
    auto client = KvClient::connect(env->master_addr, env->master_port, a.timeout, *secret);
    if (!client) {
        std::fprintf(stderr, "rank %d: %s", env->rank, client.error().str().c_str());
        return 2;
    }
    KvClient& store = **client;
    install_failure_reporting(&store, env->rank, {});
    // --no-monitor 1 leaves the store deaf to failures, so Gloo's own errors surface.
    // --on-abort record only remembers the reason, so the failure reaches the ranks
    // through Gloo and the communicator's failure handler names the peer.
    if (!a.no_monitor) {
        std::function<void(const std::string&)> on_abort;
        if (a.abort_exits) on_abort = [](const std::string& why) { fatal_run_error("aborting: " + why); };
        auto m = store.start_monitor(env->rank, a.heartbeat, on_abort, a.store_lease);
        if (!m) fatal_run_error(m.error().str());
    }

    LayoutRequest req;
    req.tp = a.tp;
    req.pp = a.pp;
    req.dp = a.dp;
    req.gpus_per_node = world;
    auto layout = make_layout(req);
    if (!layout) fatal_run_error(layout.error().str());
    if (layout->world != world)
        fatal_run_error("layout world " + std::to_string(layout->world) + " != WORLD_SIZE " + std::to_string(world));

    CommOptions co;
    co.run_id = "run-" + std::to_string(env->master_port);
    co.timeout_s = a.timeout;
    co.pair_secret = env->rank == a.impostor ? "not-" + a.pair_secret : a.pair_secret;
    co.hostname = a.listen_host;
    auto groups = make_gloo_groups(store, *layout, env->rank, co, comm_failure_handler(),
                                   [](const std::string& what) { fatal_run_error(what); });
    if (!groups) fatal_run_error(groups.error().str());

    if (a.mode == "misorder" || a.mode == "miscount") {
        break_the_contract(*groups->world, a.mode);
        groups->world->barrier();
    } else if (a.mode == "check") {
        for (Communicator* c : {groups->world.get(), groups->tp.get(), groups->pp.get(), groups->dp.get(),
                                groups->embedding.get()})
            if (c) check_group(*c);
        if ((groups->embedding != nullptr) != (a.pp > 1 && (layout->ranks[(size_t)env->rank].coord[DIM_PP] == 0 ||
                                                            layout->ranks[(size_t)env->rank].coord[DIM_PP] == a.pp - 1)))
            fatal_run_error("check failed: embedding group present on the wrong ranks");
        groups->world->barrier();
        std::printf("ok\n");
        std::fflush(stdout);
    } else {
        const bool victim = env->rank == a.victim;
        if (victim) {
            all_reduce_loop(*groups->world, a.after);
            std::fprintf(stderr, "rank %d: %s now\n", env->rank, a.mode.c_str());
            std::fflush(stderr);
            if (a.mode == "die") {
                if (a.how == "exit") _exit(9);
                raise(SIGKILL);
            }
            if (a.mode == "stall") {
                raise(SIGSTOP);
                _exit(4);  // only if someone sends SIGCONT
            }
            fatal_run_error("bad data");
        }
        // The others keep the run going until the abort ends them.
        all_reduce_loop(*groups->world, a.after + 60);
        std::fprintf(stderr, "rank %d: the run was never aborted\n", env->rank);
        return 3;
    }

    store.goodbye();
    // Rank 0 hosts the store: leaving before the others said goodbye would look to them
    // like the store dying.
    if (server && !server->wait_all_goodbye(a.timeout)) {
        std::fprintf(stderr, "rank 0: not every rank said goodbye\n");
        return 1;
    }
    return 0;
}
