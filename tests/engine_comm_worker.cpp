// engine_comm_worker.cpp — one rank of a multi-process communication test
// (test_engine_comm spawns one per rank). It sets up a run the way ptd-engine does
// (torchrun environment, rank 0's KV store, a monitor on every rank, Gloo groups for a
// TP×PP×DP layout) and then either checks every Communicator operation exactly
// (--mode check) or stages a failure for the others to detect: a killed rank (die),
// a stopped one (stall) or one that reports its own error (error).
//
//   engine_comm_worker --tp 2 --pp 2 --dp 2 [--mode check|die|stall|error]
//                      [--victim R] [--after S] [--timeout S] [--stall-timeout S]
//                      [--heartbeat S] [--how kill|exit] [--no-monitor 1]
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
#include "ptd/engine/failure.h"
#include "ptd/engine/kv_store.h"
#include "ptd/layout.h"
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
    std::string how = "kill";
    bool no_monitor = false;
    bool abort_exits = true;
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
        else if (k == "--how") a.how = v;
        else if (k == "--no-monitor") a.no_monitor = v == "1";
        else if (k == "--on-abort") a.abort_exits = v != "record";
        else usage("unknown flag " + k);
    }
    if (a.mode != "check" && a.mode != "die" && a.mode != "stall" && a.mode != "error")
        usage("--mode must be check, die, stall or error");
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

void check_group(Communicator& c) {
    const int p = c.size(), r = c.rank();
    const auto& g = c.global_ranks();
    const int me = g[(size_t)r];

    // all_reduce_sum / max on small integers: exact in float whatever the order.
    const size_t n = 1000;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = (float)((me + 1) * (int)(i % 7 + 1));
    c.all_reduce_sum(x.data(), (int64_t)n);
    for (size_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : g) want += (m + 1) * (int)(i % 7 + 1);
        expect_eq(x[i], want, c, "all_reduce_sum", i);
    }
    for (size_t i = 0; i < n; ++i) x[i] = (float)(me * 3 + (int)(i % 5)) * ((i & 1) ? -1.f : 1.f);
    c.all_reduce_max(x.data(), (int64_t)n);
    for (size_t i = 0; i < n; ++i) {
        double want = -1e30;
        for (int m : g) want = std::max(want, (double)(m * 3 + (int)(i % 5)) * ((i & 1) ? -1 : 1));
        expect_eq(x[i], want, c, "all_reduce_max", i);
    }
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i) d[i] = (me + 1) * 0.5 + (double)i * 0.25;
    c.all_reduce_sum_f64(d.data(), (int64_t)n);
    for (size_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : g) want += (m + 1) * 0.5 + (double)i * 0.25;
        expect_eq(d[i], want, c, "all_reduce_sum_f64", i);
    }

    // Inexact values (large enough for several ring segments): every member must still
    // end with the same bits. Compare against the root's result, broadcast.
    const size_t big = 300000;
    std::vector<float> y(big), root_copy(big);
    for (size_t i = 0; i < big; ++i) y[i] = std::sin((float)(me + 1) * 0.37f + (float)i * 1e-3f) / 3.0f;
    c.all_reduce_sum(y.data(), (int64_t)big);
    root_copy = y;
    c.broadcast(root_copy.data(), (int64_t)big, 0);
    if (std::memcmp(root_copy.data(), y.data(), big * sizeof(float)) != 0)
        fatal_run_error("check failed: " + c.name() + " all_reduce_sum results differ between members");

    // Uneven counts, including an empty slice.
    std::vector<int64_t> counts((size_t)p);
    for (int k = 0; k < p; ++k) counts[(size_t)k] = (k == 1 && p > 2) ? 0 : 3 + 5 * k + (k % 2) * 11;
    int64_t total = 0, my_off = 0;
    for (int k = 0; k < p; ++k) {
        if (k < r) my_off += counts[(size_t)k];
        total += counts[(size_t)k];
    }
    std::vector<float> rs((size_t)total);
    for (int64_t j = 0; j < total; ++j) rs[(size_t)j] = (float)((me + 1) * (j + 1));
    c.reduce_scatter_sum(rs.data(), counts);
    for (int64_t j = my_off; j < my_off + counts[(size_t)r]; ++j) {
        double want = 0;
        for (int m : g) want += (m + 1) * (j + 1);
        expect_eq(rs[(size_t)j], want, c, "reduce_scatter_sum", (size_t)j);
    }

    std::vector<float> ag((size_t)total, -1.f);
    for (int64_t j = my_off; j < my_off + counts[(size_t)r]; ++j) ag[(size_t)j] = (float)(me * 1000 + (j - my_off));
    c.all_gather(ag.data(), counts);
    for (int k = 0, off = 0; k < p; off += (int)counts[(size_t)k], ++k)
        for (int64_t j = 0; j < counts[(size_t)k]; ++j)
            expect_eq(ag[(size_t)(off + j)], g[(size_t)k] * 1000 + j, c, "all_gather", (size_t)(off + j));

    for (int root = 0; root < p; ++root) {
        std::vector<float> b(77, -1.f);
        if (r == root)
            for (size_t i = 0; i < b.size(); ++i) b[i] = (float)(g[(size_t)root] * 10 + (int)i);
        c.broadcast(b.data(), (int64_t)b.size(), root);
        for (size_t i = 0; i < b.size(); ++i) expect_eq(b[i], g[(size_t)root] * 10 + (int)i, c, "broadcast", i);
    }
    c.barrier();

    // Point-to-point around the ring: several tags, several asynchronous messages per
    // tag (which must arrive in order), received in a different tag order than sent.
    if (p > 1) {
        const int right = (r + 1) % p, left = (r + p - 1) % p;
        const uint32_t tags[] = {0, 7, 123456};
        const int per_tag = 3;
        std::vector<std::vector<float>> out;
        out.reserve(3 * per_tag);
        for (uint32_t tag : tags)
            for (int s = 0; s < per_tag; ++s) {
                std::vector<float> m((size_t)(50 + 17 * s + (int)(tag % 13)));
                for (size_t i = 0; i < m.size(); ++i) m[i] = (float)(me * 100000 + (int)tag % 1000 * 100 + s * 10) + (float)i * 0.5f;
                out.push_back(std::move(m));
                c.send(out.back().data(), (int64_t)out.back().size(), right, tag);
            }
        const int src = g[(size_t)left];
        for (int ti = 2; ti >= 0; --ti)
            for (int s = 0; s < per_tag; ++s) {
                uint32_t tag = tags[ti];
                std::vector<float> m((size_t)(50 + 17 * s + (int)(tag % 13)), -7.f);
                c.recv(m.data(), (int64_t)m.size(), left, tag);
                for (size_t i = 0; i < m.size(); ++i)
                    expect_eq(m[i], (float)(src * 100000 + (int)tag % 1000 * 100 + s * 10) + (float)i * 0.5f, c, "recv", i);
            }
        c.wait_sends();
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

    std::unique_ptr<KvServer> server;
    if (env->rank == 0) {
        KvServerOptions so;
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
    auto client = KvClient::connect(env->master_addr, env->master_port, 30);
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
        auto m = store.start_monitor(env->rank, a.heartbeat, on_abort);
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
    auto groups = make_gloo_groups(store, *layout, env->rank, co, comm_failure_handler());
    if (!groups) fatal_run_error(groups.error().str());

    if (a.mode == "check") {
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
