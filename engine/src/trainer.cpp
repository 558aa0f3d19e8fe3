// trainer.cpp — one rank's training run: everything between `ptd-engine --job` and the
// last metrics line. Setup (layout, store, liveness monitor, Gloo groups, data, model,
// optimizer, the estimators' prediction for this rank), optional resume, the step loop
// (1F1B pipeline, gradient reduction, global-norm clip, AdamW), metrics, checkpoints, and
// an orderly goodbye so that rank 0's store outlives everyone who still needs it.
#include "ptd/engine/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <sstream>
#include <thread>

#include "ptd/engine/blas_core.h"
#include "ptd/engine/checkpoint.h"
#include "ptd/engine/data.h"
#include "ptd/engine/failure.h"
#include "ptd/engine/kv_store.h"
#include "ptd/engine/metrics.h"
#include "ptd/model/estimate.h"
#include "ptd/layout/job_layout.h"
#include "ptd/layout/layout.h"
#include "device_select.h"
#include "timing.h"
#ifdef PTD_HAVE_NCCL
#include "nccl_comm.h"
#endif

namespace ptd::engine {

namespace {

namespace fs = std::filesystem;

// Everything one run owns.
struct RunState {
    JobSpec job;
    RankEnv env;
    TrainOptions opt;
    std::string run_id, run_dir;
    // The restarts the launcher had recorded in run_dir when this rank started (nullopt: the
    // record could not be read then, so no newer attempt can be told apart).
    std::optional<int> restarts_at_start;
    RankLayout layout;
    EngineConfig cfg;
    int threads = 1;
    bool threads_given = false;    // --threads or OMP_NUM_THREADS: kept whatever the machine's ranks
    HostCores host_cores;          // the machine's ranks and this rank's share of its cores
    std::unique_ptr<Backend> be;
    BackendChoice backend;         // which backend and device (--backend)
    DeviceMemReadings device_mem;  // cudaMemGetInfo around communicator set-up (CUDA backends)
    std::unique_ptr<KvServer> server;
    std::unique_ptr<KvClient> store;
    CommGroups groups;
    std::unique_ptr<TokenSource> data;
    Model model;
    Activations acts;
    OptimizerState optim;
    int32_t* host_tokens = nullptr;  // the step's token ids [m][b][s+1] (backend host staging)
    double* host_scalars = nullptr;  // the step scalars' one download lands here (backend host staging)
    int64_t step = 0;              // optimizer steps completed
    // The measured timeline (TrainOptions::timeline_steps): open while steps are recorded.
    std::optional<TimelineWriter> timeline;
    int64_t timeline_first_step = 0;
    // The measured timeline's time base: a steady-clock point and the wall-clock time
    // (ns since the Unix epoch) it was taken at. Every rank writes wall-clock ns, so the
    // ranks of one host share one time axis (across hosts, as far as their clocks agree);
    // readers subtract the earliest block.
    std::optional<std::pair<clock_type::time_point, int64_t>> timeline_epoch;
    size_t timeline_reserve = 0;
    int64_t data_position = 0;     // global sequences consumed
    int64_t resumed_from = -1;
    MetricsSource src;
    double predicted[MEM_CATEGORY_COUNT] = {-1, -1, -1, -1, -1, -1};
    double predicted_total = -1;
    double model_flops_per_token = 0;
    double peak_tflops = 0;
    int64_t params_total = 0;
    // fp16 dynamic loss scaling (Micikevicius et al. 2018, §3.2; Megatron's
    // DynamicGradScaler): the loss gradient is multiplied by loss_scale; a step whose main
    // grads hold an inf/NaN is skipped and the scale halved; after kScaleGrowthInterval
    // good steps in a row it doubles.
    bool loss_scaling = false;
    double loss_scale = 1.0;
    int64_t good_steps = 0;        // since the last overflow or growth
    int64_t skipped_steps = 0;     // in the whole run (restored on resume)
    int64_t inject_overflow_step = -1;  // test hook: PTD_ENGINE_INJECT_OVERFLOW_STEP
    bool cuda_graphs = false;           // PTD_CUDA_GRAPHS=1 (run_pipeline_step)
    double inject_compute_delay_s = 0;  // test hook: PTD_ENGINE_INJECT_SLOW_RANK (this rank's share)
};

constexpr double kInitialLossScale = 65536.0;  // 2^16, as PyTorch's GradScaler starts
constexpr int64_t kScaleGrowthInterval = 1000;  // Megatron's default (--loss-scale-window)
constexpr double kMinLossScale = 1.0;

void log_line(const RunState& s, const std::string& msg) {
    std::fprintf(stderr, "ptd-engine: rank %d: %s\n", s.env.rank, msg.c_str());
}

// A setup error before the run's failure reporting exists (or in a 1-rank run).
int setup_error(const RunState& s, const std::string& msg, int code = 2) {
    std::string text = msg;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    for (size_t nl; (nl = text.find('\n')) != std::string::npos;) text.replace(nl, 1, "; ");
    std::fprintf(stderr, "ptd-engine: rank %d: error: %s\n", s.env.rank, text.c_str());
    nlohmann::json j = metrics_event(s.src, "error");
    j["message"] = text;
    emit_metrics_line(j);
    return code;
}

// A failure once the run is connected: with peers, through the store so that they stop
// too (does not return); alone, a located error and exit code 1.
int run_failure(const RunState& s, const std::string& msg) {
    if (s.store) fatal_run_error(msg);
    return setup_error(s, msg, 1);
}

std::string make_run_id() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
    return std::string(buf) + "-" + std::to_string((long)getpid());
}

// OMP_NUM_THREADS as a count, 0 where it is unset or not one.
int omp_env_threads() {
    const char* omp = std::getenv("OMP_NUM_THREADS");
    return omp ? std::max(0, std::atoi(omp)) : 0;
}

// ---- setup ---------------------------------------------------------------------------------

int connect_run(RunState& s) {
    const int world = s.env.world_size, rank = s.env.rank;
    auto emit_error = [&s](const std::string& message) {
        nlohmann::json j = metrics_event(s.src, "error");
        j["message"] = message;
        emit_metrics_line(j);
    };
    // Checked here too so that a bad value is an error in a single-process run as well.
    auto strict = strict_fifo_from_env();
    if (!strict) {
        const Diagnostic& d = strict.error().diagnostics.front();
        return setup_error(s, d.key + ": " + d.message, 2);
    }
    if (world == 1) {
        s.run_id = std::getenv("PTD_RUN_ID") ? std::getenv("PTD_RUN_ID") : make_run_id();
        s.src.run_id = s.run_id;
        install_failure_reporting(nullptr, rank, emit_error);
        s.groups.world = make_self_communicator("world", 0);
        s.groups.tp = make_self_communicator("tp", 0);
        s.groups.pp = make_self_communicator("pp", 0);
        s.groups.dp = make_self_communicator("dp", 0);
        return 0;
    }
#ifdef PTD_HAVE_NCCL
    constexpr bool have_nccl = true;
#else
    constexpr bool have_nccl = false;
#endif
    if (std::string no = multi_rank_refusal(s.backend.kind, world, have_nccl); !no.empty()) return setup_error(s, no, 2);
    auto secret = run_secret_from_env(s.env.master_addr);
    if (!secret) {
        const Diagnostic& d = secret.error().diagnostics.front();
        return setup_error(s, d.key + " " + d.message, 2);
    }
    if (rank == 0) {
        KvServerOptions so;
        // Only the address the other ranks were told to use: not every interface.
        so.bind_addr = s.env.master_addr;
        so.secret = *secret;
        so.port = s.env.master_port;
        so.world_size = world;
        so.stall_timeout_s = s.opt.stall_timeout_s;
        auto server = KvServer::start(so);
        if (!server) return setup_error(s, server.error().one_line(), 1);
        s.server = std::move(*server);
    }
    auto store = KvClient::connect(s.env.master_addr, s.env.master_port, s.opt.comm_timeout_s, *secret);
    if (!store) return setup_error(s, store.error().one_line(), 1);
    s.store = std::move(*store);
    // The run id names every key of this run and its run directory: rank 0 decides.
    if (const char* id = std::getenv("PTD_RUN_ID")) {
        s.run_id = id;
    } else if (rank == 0) {
        s.run_id = make_run_id();
        s.store->set("run_id", std::vector<uint8_t>(s.run_id.begin(), s.run_id.end()));
    } else {
        auto v = s.store->get("run_id", s.opt.comm_timeout_s);
        if (!v) return setup_error(s, v.error().one_line(), 1);
        s.run_id.assign(v->begin(), v->end());
    }
    s.src.run_id = s.run_id;
    install_failure_reporting(s.store.get(), rank, emit_error);
    auto mon = s.store->start_monitor(rank, s.opt.heartbeat_s,
                                      [](const std::string& why) {
#ifdef PTD_HAVE_NCCL
                                          // A NCCL kernel waiting for the dead peer must end first.
                                          abort_nccl_communicators(why);
#endif
                                          fatal_run_error("aborting: " + why);
                                      },
                                      s.opt.store_lease_s);
    if (!mon) return setup_error(s, mon.error().one_line(), 1);
    CommOptions co;
    co.run_id = s.run_id;
    co.timeout_s = s.opt.comm_timeout_s;
    co.strict_fifo = *strict;
    co.pair_secret = *secret;
    // A strict-mode mismatch is this rank's finding, not a lost peer: report it as is.
#ifdef PTD_HAVE_NCCL
    // The CUDA backend's collectives run in NCCL on its comm stream; the CPU and the
    // simulator (host memory) use Gloo.
    if (s.backend.kind == BackendKind::cuda) {
        auto groups = make_nccl_groups(*s.store, s.layout, rank, co, comm_failure_handler(),
                                       static_cast<cudaStream_t>(s.be->native_stream(Stream::comm)));
        if (!groups) fatal_run_error(groups.error().one_line());
        s.groups = std::move(*groups);
        return 0;
    }
#endif
    auto groups = make_gloo_groups(*s.store, s.layout, rank, co, comm_failure_handler(),
                                   [](const std::string& what) { fatal_run_error(what); });
    if (!groups) fatal_run_error(groups.error().one_line());
    s.groups = std::move(*groups);
    return 0;
}

void compute_prediction(RunState& s) {
    JobSpec pj = s.job;
    pj.estimate.activation_profile = ActivationProfile::ptd_engine;
    const Estimate est = estimate_job(pj);
    const StageEstimate& st = est.stages[(size_t)s.cfg.pp_rank];
    s.predicted[MEM_PARAMS] = st.mem.params;
    s.predicted[MEM_GRADS] = st.mem.grads;
    s.predicted[MEM_OPTIMIZER] = st.mem.optimizer;
    s.predicted[MEM_ACTIVATIONS] = st.mem.activations;
    s.predicted_total = st.mem.model_states() + st.mem.activations + st.mem.temp;
    s.model_flops_per_token = est.flops.model_per_token;
    s.peak_tflops = est.peak_tflops;
    s.params_total = est.params.total;
}

// ---- checkpoints ---------------------------------------------------------------------------

// "" while this rank may still write into the run directory; otherwise why not: its lease
// on the store has run out, or the launcher has recorded a restart since this rank started,
// so a newer attempt owns the directory (docs/engine.md, "The store lease").
std::string run_dir_not_ours(const RunState& s) {
    if (s.store)
        if (std::string lost = s.store->lease_lost(); !lost.empty()) return lost;
    if (!s.restarts_at_start) return "";
    const std::optional<int> now = restarts_recorded(s.run_dir);
    if (!now || *now <= *s.restarts_at_start) return "";
    return "a newer attempt owns the run directory: " + s.run_dir + " records " + std::to_string(*now) +
           " restart(s), and this rank started after " + std::to_string(*s.restarts_at_start);
}

// Before this rank writes `what` into the run directory: stops it, naming `what` and why,
// when the directory is no longer its run's (run_dir_not_ours).
void stop_unless_run_dir_ours(RunState& s, const std::string& what) {
    if (std::string why = run_dir_not_ours(s); !why.empty()) fatal_run_error(what + " not written: " + why);
}

struct ShardState {
    int64_t step = 0, data_position = 0, numel = 0, shard_offset = 0, shard_numel = 0, optimizer_step = 0;
};

void write_checkpoint(RunState& s) {
    const auto t0 = clock_type::now();
    // Only while the run directory is this rank's run's: a rank cut off from its run may be
    // outlived by a restart that now owns it. Asked before the write starts and again right
    // before each file is renamed into place.
    const CommitGuard still_ours = [&s] { return run_dir_not_ours(s); };
    stop_unless_run_dir_ours(s, "checkpoint of step " + std::to_string(s.step));
    const std::string dir = checkpoint_dir(s.run_dir, s.step);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fatal_run_error("cannot create checkpoint directory " + dir + ": " + ec.message());
    Backend& be = *s.be;
    // params: the model weights as stored (16-bit in mixed precision); master: the f32
    // master weights of this rank's shard (mixed precision only).
    std::vector<uint8_t> params((size_t)s.model.numel * dtype_bytes(s.cfg.act));
    std::vector<float> m((size_t)s.optim.shard_numel), v((size_t)s.optim.shard_numel),
        master(s.optim.master ? (size_t)s.optim.shard_numel : 0);
    be.download(params.data(), s.model.params, params.size());
    be.download(m.data(), s.optim.m, m.size() * sizeof(float));
    be.download(v.data(), s.optim.v, v.size() * sizeof(float));
    if (s.optim.master) be.download(master.data(), s.optim.master, master.size() * sizeof(float));
    nlohmann::json state = {{"step", s.step},           {"data_position", s.data_position},
                            {"numel", s.model.numel},   {"shard_offset", s.optim.shard_offset},
                            {"shard_numel", s.optim.shard_numel}, {"optimizer_step", s.optim.step}};
    if (s.loss_scaling) {
        state["loss_scale"] = s.loss_scale;
        state["good_steps"] = s.good_steps;
        state["skipped_steps"] = s.skipped_steps;
    }
    const std::string state_text = state.dump();
    const std::string path = dir + "/" + shard_file_name(s.env.rank);
    std::vector<BlobView> blobs = {{"state", state_text.data(), state_text.size()},
                                    {"params", params.data(), params.size()},
                                    {"adam.m", m.data(), m.size() * sizeof(float)},
                                    {"adam.v", v.data(), v.size() * sizeof(float)}};
    if (s.optim.master) blobs.push_back({"master", master.data(), master.size() * sizeof(float)});
    auto sha = write_shard(path, s.env.rank, blobs, still_ours);
    if (!sha) fatal_run_error(sha.error().one_line());
    const int64_t bytes = (int64_t)fs::file_size(path, ec);
    // What rank 0's manifest records of this shard: digest, size, optimizer range.
    const std::string entry = *sha + " " + std::to_string(bytes) + " " + std::to_string(s.optim.shard_offset) + " " +
                              std::to_string(s.optim.shard_numel);
    const std::string key_prefix = "ckpt/" + std::to_string(s.step) + "/";
    if (s.store) s.store->set(key_prefix + std::to_string(s.env.rank), std::vector<uint8_t>(entry.begin(), entry.end()));
    if (s.env.rank == 0) {
        Manifest man = make_manifest(s.job, s.env.world_size, s.run_id, s.step, s.data_position,
                                     "none: the engine draws no random numbers after initialisation");
        man.files.clear();
        for (int r = 0; r < s.env.world_size; ++r) {
            std::string e = entry;
            if (r != 0) {
                auto got = s.store->get(key_prefix + std::to_string(r), s.opt.comm_timeout_s);
                if (!got) fatal_run_error("checkpoint of step " + std::to_string(s.step) + ": " + got.error().one_line());
                e.assign(got->begin(), got->end());
            }
            ManifestFile f;
            f.rank = r;
            f.file = shard_file_name(r);
            std::istringstream fields(e);
            fields >> f.sha256 >> f.bytes >> f.optimizer_offset >> f.optimizer_count;
            if (!fields) fatal_run_error("checkpoint of step " + std::to_string(s.step) + ": rank " + std::to_string(r) +
                                         " reported \"" + e + "\", not \"<sha256> <bytes> <offset> <count>\"");
            man.files.push_back(f);
        }
        auto w = write_manifest(dir, man, still_ours);
        if (!w) fatal_run_error(w.error().one_line());
    }
    nlohmann::json j = metrics_event(s.src, "checkpoint");
    j["step"] = s.step;
    j["dir"] = dir;
    j["bytes"] = bytes;
    j["sha256"] = *sha;
    j["seconds"] = since(t0);
    emit_metrics_line(j);
}

int resume_run(RunState& s) {
    // Rank 0 picks the checkpoint, so every rank resumes from the same step.
    std::string dir;
    if (s.env.rank == 0) {
        auto latest = find_latest_checkpoint(s.run_dir);
        dir = latest ? *latest : "";
        if (s.store) s.store->set("resume_dir", std::vector<uint8_t>(dir.begin(), dir.end()));
    } else {
        auto v = s.store->get("resume_dir", s.opt.comm_timeout_s);
        if (!v) fatal_run_error(v.error().one_line());
        dir.assign(v->begin(), v->end());
    }
    if (dir.empty())
        return run_failure(s, "--resume: no complete checkpoint (a step-* directory with manifest.json) under " + s.run_dir + "/checkpoints");
    auto man = read_manifest(dir);
    if (!man) return run_failure(s, man.error().one_line());
    bool reshard = false;
    if (auto ok = check_resume_compatible(*man, s.job, s.env.world_size, &reshard); !ok)
        return run_failure(s, ok.error().one_line());
    // The shard files this rank reads: its own, or (another dp) every dp rank's of its
    // (tp, cp, pp) position, whose optimizer slices it joins and cuts again.
    std::vector<int> sources = {s.env.rank};
    if (reshard) {
        const RankPlace& me = s.layout.ranks[(size_t)s.env.rank];
        auto src = reshard_source_ranks(man->layout, me.coord[DIM_TP], me.coord[DIM_CP], me.coord[DIM_PP]);
        if (!src) return run_failure(s, dir + "/manifest.json: " + src.error().one_line());
        sources = *src;
    }
    std::optional<Shard> first;  // the first source: weights and training state
    nlohmann::json first_state_step;
    std::vector<OptimizerSlice> slices;
    for (int source : sources) {
        const ManifestFile* entry = nullptr;
        for (const ManifestFile& f : man->files)
            if (f.rank == source) entry = &f;
        if (!entry) return run_failure(s, dir + "/manifest.json: no shard listed for rank " + std::to_string(source));
        const std::string path = dir + "/" + entry->file;
        auto shard = read_shard(path, entry->sha256);
        if (!shard) return run_failure(s, shard.error().one_line());
        const Blob* state = shard->find("state");
        if (!state || !shard->find("params") || !shard->find("adam.m") || !shard->find("adam.v"))
            return run_failure(s, path + ": missing blob (needs state, params, adam.m, adam.v)");
        nlohmann::json st = nlohmann::json::parse(std::string(state->bytes.begin(), state->bytes.end()), nullptr, false);
        if (st.is_discarded() || !st.contains("step") || !st.contains("numel") || !st.contains("shard_offset") ||
            !st["numel"].is_number_integer() || !st["shard_offset"].is_number_integer())
            return run_failure(s, path + ": the state blob is not valid JSON with step, numel and shard_offset");
        const int64_t numel = st["numel"].get<int64_t>();
        const Blob* params = shard->find("params");
        if (numel != s.model.numel || (int64_t)params->bytes.size() != numel * dtype_bytes(s.cfg.act))
            return run_failure(s, path + ": holds " + std::to_string(numel) + " parameters; this rank has " +
                                      std::to_string(s.model.numel));
        if (reshard) {
            const auto floats = [](const Blob* b) {
                std::vector<float> f(b ? b->bytes.size() / sizeof(float) : 0);
                if (!f.empty()) std::memcpy(f.data(), b->bytes.data(), f.size() * sizeof(float));
                return f;
            };
            const Blob* master = shard->find("master");
            const size_t m_bytes = shard->find("adam.m")->bytes.size();
            if (m_bytes % sizeof(float) != 0 || shard->find("adam.v")->bytes.size() != m_bytes ||
                (master && master->bytes.size() != m_bytes))
                return run_failure(s, path + ": adam.m, adam.v and master are not f32 blobs of one size (" +
                                          std::to_string(m_bytes) + " bytes of adam.m)");
            OptimizerSlice slice;
            slice.offset = st["shard_offset"].get<int64_t>();
            slice.m = floats(shard->find("adam.m"));
            slice.v = floats(shard->find("adam.v"));
            slice.master = floats(master);
            slice.source = path;
            if (entry->optimizer_offset >= 0 &&
                (slice.offset != entry->optimizer_offset || (int64_t)slice.m.size() != entry->optimizer_count))
                return run_failure(s, path + ": holds the optimizer state of elements " + std::to_string(slice.offset) +
                                          " + " + std::to_string(slice.m.size()) + "; " + dir +
                                          "/manifest.json records " + std::to_string(entry->optimizer_offset) + " + " +
                                          std::to_string(entry->optimizer_count));
            if (!slices.empty() && st["step"] != first_state_step)
                return run_failure(s, path + ": holds step " + st["step"].dump() + ", the other shards of " + dir +
                                          " step " + first_state_step.dump());
            slices.push_back(std::move(slice));
        }
        if (!first) {
            first_state_step = st["step"];
            first = std::move(*shard);
        }
    }
    const std::string first_file = dir + "/" + shard_file_name(sources.front());
    const Blob* state = first->find("state");
    const Blob* params = first->find("params");
    nlohmann::json st = nlohmann::json::parse(std::string(state->bytes.begin(), state->bytes.end()), nullptr, false);
    s.be->upload(s.model.params, params->bytes.data(), params->bytes.size());
    if (reshard) {
        auto mine = reslice_optimizer(slices, s.model.numel, s.optim.shard_offset, s.optim.shard_numel, s.optim.master != nullptr);
        if (!mine) return run_failure(s, dir + ": " + mine.error().one_line());
        s.be->upload(s.optim.m, mine->m.data(), mine->m.size() * sizeof(float));
        s.be->upload(s.optim.v, mine->v.data(), mine->v.size() * sizeof(float));
        if (s.optim.master) s.be->upload(s.optim.master, mine->master.data(), mine->master.size() * sizeof(float));
    } else {
        const Blob* m = first->find("adam.m");
        const Blob* v = first->find("adam.v");
        const Blob* master = first->find("master");
        if (s.optim.master && (!master || (int64_t)master->bytes.size() != s.optim.shard_numel * 4))
            return run_failure(s, first_file + ": the master blob (f32 master weights of " +
                                      std::to_string(s.optim.shard_numel) + " elements) is missing or has another size");
        if ((int64_t)m->bytes.size() != s.optim.shard_numel * 4 || (int64_t)v->bytes.size() != s.optim.shard_numel * 4)
            return run_failure(s, first_file + ": holds " + std::to_string(m->bytes.size() / 4) +
                                      " optimizer elements; this rank has " + std::to_string(s.optim.shard_numel));
        s.be->upload(s.optim.m, m->bytes.data(), m->bytes.size());
        s.be->upload(s.optim.v, v->bytes.data(), v->bytes.size());
        if (s.optim.master) s.be->upload(s.optim.master, master->bytes.data(), master->bytes.size());
    }
    if (s.loss_scaling && st.contains("loss_scale")) {
        s.loss_scale = st["loss_scale"].get<double>();
        s.good_steps = st.value("good_steps", (int64_t)0);
        s.skipped_steps = st.value("skipped_steps", (int64_t)0);
    }
    s.step = st["step"].get<int64_t>();
    s.data_position = st["data_position"].get<int64_t>();
    s.optim.step = st["optimizer_step"].get<int64_t>();
    s.resumed_from = s.step;
    log_line(s, "resumed from " + dir + " (step " + std::to_string(s.step) + ")" +
                    (reshard ? ", written at " + describe_layout(man->layout) + ": optimizer shards re-split for dp " +
                                   std::to_string(s.cfg.dp)
                             : std::string()));
    return 0;
}

// ---- the step ------------------------------------------------------------------------------

// Reads the step's sequences straight into the backend's host staging buffer.
StepBatch read_batch(RunState& s) {
    const EngineConfig& c = s.cfg;
    StepBatch b;
    if (!s.host_tokens) return b;  // middle stages need no tokens
    const int64_t first = s.data_position + (int64_t)c.dp_rank * c.grad_accum * c.micro_batch;
    const int64_t per_mb = (int64_t)c.micro_batch * (c.seq + 1);
    for (int j = 0; j < c.grad_accum; ++j)
        s.data->read_sequences(first + (int64_t)j * c.micro_batch, c.micro_batch, c.seq, s.host_tokens + j * per_mb);
    b.tokens = s.host_tokens;
    return b;
}

nlohmann::json coords_json(const EngineConfig& c) { return {{"tp", c.tp_rank}, {"pp", c.pp_rank}, {"dp", c.dp_rank}}; }

void emit_start(RunState& s) {
    const EngineConfig& c = s.cfg;
    nlohmann::json j = metrics_event(s.src, "start");
    j["world_size"] = c.world;
    j["coords"] = coords_json(c);
    j["layout"] = {{"tp", c.tp}, {"pp", c.pp}, {"dp", c.dp}, {"zero", c.zero},
                   {"sequence_parallel", c.sequence_parallel}, {"recompute", to_string(c.recompute())},
                   {"order", s.job.parallel.order}};
    j["model"] = {{"name", s.job.model.name}, {"params", s.params_total}, {"vocab_padded", c.vocab_padded}};
    j["layers"] = {c.layer0, c.layer0 + c.layers};
    if (c.vpp > 1) {
        // Interleaved: the stage's layers are not contiguous; one [first, end) per chunk.
        nlohmann::json chunks = nlohmann::json::array();
        for (int k = 0; k < c.vpp; ++k)
            chunks.push_back({c.chunk_layer0[(size_t)k], c.chunk_layer0[(size_t)k] + c.chunk_layers[(size_t)k]});
        j["chunks"] = chunks;
    }
    j["params_local"] = s.model.numel;
    j["micro_batch"] = c.micro_batch;
    j["grad_accum"] = c.grad_accum;
    j["global_batch"] = c.global_batch;
    j["seq_len"] = c.seq;
    j["threads"] = s.threads;
    j["blas"] = blas_choice().to_json();
    j["backend"] = s.be->name();
    j["device"] = s.backend.to_json();
    if (s.backend.kind != BackendKind::cpu) j["device_memory"] = device_memory_json(account_device_memory(s.device_mem));
    j["precision"] = to_string(s.job.training.precision);
    j["data"] = s.data->describe();
    j["run_dir"] = s.run_dir;
    j["steps"] = s.job.training.steps;
    j["resumed_from"] = s.resumed_from < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.resumed_from);
    j["memory"] = memory_json(s.be->mem_stats(), s.predicted, s.predicted_total);
    j["peak_tflops"] = s.peak_tflops;
    emit_metrics_line(j);
}

// Writes one recorded step through the rank's TimelineWriter (times in wall-clock ns, see
// timeline_epoch) and flushes it, so a run that dies later keeps
// the steps already recorded.
void write_timeline_step(RunState& s, const TimelineRecorder& rec, int step) {
    if (rec.blocks.empty()) return;
    if (!s.timeline_epoch) {
        const clock_type::time_point steady = clock_type::now();
        const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
        s.timeline_epoch = {steady, wall};
    }
    auto ns = [&](clock_type::time_point t) {
        return s.timeline_epoch->second +
               (int64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(t - s.timeline_epoch->first).count();
    };
    for (const RecordedBlock& b : rec.blocks)
        s.timeline->record(b.kind, step, b.micro_batch, b.chunk, b.stream, ns(b.start), ns(b.end));
    s.timeline_reserve = std::max(s.timeline_reserve, rec.blocks.size());
    stop_unless_run_dir_ours(s, "measured timeline of step " + std::to_string(step));
    if (auto ok = s.timeline->flush(); !ok) fatal_run_error("measured timeline: " + ok.error().one_line());
}

void train_one_step(RunState& s) {
    const EngineConfig& c = s.cfg;
    StepTimes times;
    const auto t0 = clock_type::now();
    const TransferStats transfers0 = s.be->transfer_stats();
    StepBatch batch = read_batch(s);
    batch.loss_scale = (float)s.loss_scale;
    // The step's scalars stay on the device until the one download after the update.
    double* scalars = s.optim.scalars;
    s.be->zero(scalars, STEP_SCALAR_COUNT * sizeof(double));
    times.inject_compute_delay_s = s.inject_compute_delay_s;
    TimelineRecorder recorder;
    if (s.timeline && (s.opt.timeline_steps < 0 || s.step - s.timeline_first_step < s.opt.timeline_steps)) {
        recorder.blocks.reserve(s.timeline_reserve);
        times.timeline = &recorder;
    }
    run_pipeline_step(s.model, s.acts, s.groups, batch, scalars + SCALAR_LOSS_SUM, times, s.cuda_graphs);
    reduce_gradients(s.model, s.optim, s.groups, times);  // records its own `tp` and `dp` blocks
    // Test hook: an overflow in one main-grad element of rank 0, as an fp16 overflow leaves it.
    if (s.step + 1 == s.inject_overflow_step && s.env.rank == 0)
        s.be->fill(s.model.grads, DType::f32, std::numeric_limits<float>::infinity(), 1);
    accumulate_grad_squares(s.model, s.optim);
    // One world all-reduce carries the loss (from the last stage) and Σ g² (from every rank).
    {
        const auto t1 = clock_type::now();
        static_assert(SCALAR_GRAD_SQUARES == SCALAR_LOSS_SUM + 1, "one f64 all-reduce carries both");
        CommOnStream on_comm(*s.be, s.model.comm_ready, s.model.comm_done);
        s.groups.world->all_reduce(scalars + SCALAR_LOSS_SUM, 2, DType::f64, ReduceOp::sum);
        times.dp_comm += since(t1);
        if (times.timeline) times.timeline->add(BlockKind::dp_comm, -1, -1, kStreamComm, t1);
    }
    s.be->finish_step_scalars(scalars, s.job.training.grad_clip, s.loss_scale);
    const double lr = learning_rate(s.job.training, s.step);
    // Skips the update on its own when the loss or the norm is not finite.
    optimizer_step(s.model, s.optim, s.groups, (float)lr, times);  // records its `optimizer` and (ZeRO-1) `dp` blocks
    // The step's one read of the device, into the backend's host staging (pinned on a GPU).
    s.be->download(s.host_scalars, scalars, sizeof(double) * STEP_SCALAR_COUNT);
    double host[STEP_SCALAR_COUNT];
    std::copy(s.host_scalars, s.host_scalars + STEP_SCALAR_COUNT, host);
    const TransferStats transfers1 = s.be->transfer_stats();
    const double tokens = (double)c.global_batch * c.seq;
    const double loss = host[SCALAR_LOSS_SUM] / tokens;
    const double grad_norm = host[SCALAR_GRAD_NORM];  // unscaled (finish_step_scalars)
    const double clip_scale = host[SCALAR_CLIP_SCALE];
    const double scale_used = host[SCALAR_LOSS_SCALE];
    // The one overflow check of every precision: finish_step_scalars set found-inf on the
    // device and AdamW skipped the update there. fp16 lowers the scale and goes on; fp32 and
    // bf16 have no loss scale to lower, so a non-finite loss or norm stops the run.
    const bool found_inf = host[SCALAR_FOUND_INF] != 0.0;
    if (found_inf && !s.loss_scaling)
        fatal_run_error("step " + std::to_string(s.step + 1) + ": loss " + std::to_string(loss) + ", gradient norm " +
                        std::to_string(grad_norm) + " is not finite; the update was skipped and the run stops before the weights are corrupted");
    if (found_inf) {
        // fp16 overflow: every rank saw the same all-reduced sums, so all skipped together.
        --s.optim.step;  // the skipped update does not count for Adam's bias correction
        s.loss_scale = std::max(kMinLossScale, s.loss_scale * 0.5);
        s.good_steps = 0;
        ++s.skipped_steps;
    } else if (s.loss_scaling && ++s.good_steps >= kScaleGrowthInterval) {
        s.loss_scale *= 2.0;
        s.good_steps = 0;
    }
    if (times.timeline) write_timeline_step(s, recorder, (int)s.step + 1);
    ++s.step;
    s.data_position += c.global_batch;
    times.total = since(t0);
    times.compute = std::max(0.0, times.total - times.tp_comm - times.pp_comm - times.pipeline_idle - times.dp_comm -
                                      times.optimizer);

    const double tokens_per_s = tokens / times.total;
    const double tflops = s.model_flops_per_token * tokens / times.total / c.world / 1e12;
    nlohmann::json j = metrics_event(s.src, "step");
    j["step"] = s.step;
    j["coords"] = coords_json(c);
    j["loss"] = loss;
    j["lr"] = lr;
    j["grad_norm"] = grad_norm;
    j["clipped"] = clip_scale < 1.0;
    j["host_transfers"] = {{"uploads", transfers1.uploads - transfers0.uploads},
                           {"downloads", transfers1.downloads - transfers0.downloads}};
    if (s.loss_scaling) {
        j["loss_scale"] = scale_used;
        j["skipped"] = found_inf;
        j["skipped_steps"] = s.skipped_steps;
    }
    j["tokens"] = tokens;
    j["tokens_per_s"] = tokens_per_s;
    j["tflops"] = tflops;
    j["mfu"] = s.peak_tflops > 0 ? tflops / s.peak_tflops : 0.0;
    j["time"] = {{"step", times.total},        {"compute", times.compute},     {"tp_comm", times.tp_comm},
                 {"pp_comm", times.pp_comm},   {"pipeline_idle", times.pipeline_idle},
                 {"dp_comm", times.dp_comm},   {"optimizer", times.optimizer}};
    j["memory"] = memory_json(s.be->mem_stats(), s.predicted, s.predicted_total);
    emit_metrics_line(j);
    if (s.env.rank == 0) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "step %lld/%d | loss %.4f | lr %.3g | grad norm %.3f | %.0f tok/s | %.2f TFLOP/s | MFU %.1f%%",
                      (long long)s.step, s.job.training.steps, loss, lr, grad_norm, tokens_per_s, tflops,
                      100.0 * (s.peak_tflops > 0 ? tflops / s.peak_tflops : 0.0));
        log_line(s, buf);
        if (found_inf)
            log_line(s, "step " + std::to_string(s.step) + ": gradient overflow at loss scale " +
                            std::to_string(scale_used) + "; step skipped, loss scale now " + std::to_string(s.loss_scale));
    }
}

void teardown(RunState& s) {
    if (s.be) {
        s.be->seal_allocations(false);
        free_activations(*s.be, s.acts);
        free_optimizer(*s.be, s.optim);
        free_model(s.model);
        s.be->release_host(s.host_tokens);
        s.be->release_host(s.host_scalars);
        s.host_tokens = nullptr;
        s.host_scalars = nullptr;
    }
}

// Everything before the model: layout, config, backend, store and groups (run_training
// and connect_rank share it). 0, or the exit code after a reported error.
int setup_connected(RunState& s, const JobSpec& job, const RankEnv& env, const TrainOptions& options) {
    s.job = job;
    s.env = env;
    s.opt = options;
    s.src.rank = env.rank;
    s.src.run_id = std::getenv("PTD_RUN_ID") ? std::getenv("PTD_RUN_ID") : "";
    if (env.world_size != job.world_size())
        return setup_error(s, "WORLD_SIZE: got " + std::to_string(env.world_size) + ", but the job has " +
                                  std::to_string(job.world_size()) + " ranks (cluster.nodes × cluster.gpus_per_node)");
    auto layout = job_layout(job);
    if (!layout) return setup_error(s, layout.error().one_line());
    s.layout = std::move(*layout);
    auto cfg = make_engine_config(job, s.layout, env.rank);
    if (!cfg) return setup_error(s, cfg.error().one_line());
    s.cfg = *cfg;
    // Until every rank's mask is known (below), a default from this rank's own mask and
    // LOCAL_WORLD_SIZE; the backend is made with it.
    s.threads_given = options.threads > 0 || omp_env_threads() > 0;
    s.threads = options.threads > 0   ? options.threads
                : omp_env_threads() > 0 ? omp_env_threads()
                                        : default_compute_threads(env.local_world_size);
    s.loss_scaling = job.training.precision == Precision::fp16;
    if (s.loss_scaling) s.loss_scale = kInitialLossScale;
    if (const char* inj = std::getenv("PTD_ENGINE_INJECT_OVERFLOW_STEP")) {
        char* end = nullptr;
        const long long k = std::strtoll(inj, &end, 10);
        if (!*inj || *end || k < 1)
            return setup_error(s, std::string("PTD_ENGINE_INJECT_OVERFLOW_STEP: got \"") + inj +
                                      "\"; allowed: a step number ≥ 1 (a test hook: that step's gradients overflow)");
        s.inject_overflow_step = k;
    }
    // Test hook: "RANK:MS" — that rank's forward and backward blocks each take MS ms longer
    // (a sleep inside the block), so a run has a known straggler (docs/engine.md).
    if (const char* slow = std::getenv("PTD_ENGINE_INJECT_SLOW_RANK")) {
        char* end = nullptr;
        const long rank = std::strtol(slow, &end, 10);
        const char* ms_at = end && *end == ':' ? end + 1 : nullptr;
        char* ms_end = nullptr;
        const double ms = ms_at ? std::strtod(ms_at, &ms_end) : -1;
        if (end == slow || !ms_at || ms_end == ms_at || *ms_end || rank < 0 || !(ms > 0 && ms <= 10000))
            return setup_error(s, std::string("PTD_ENGINE_INJECT_SLOW_RANK: got \"") + slow +
                                      "\"; allowed: RANK:MS, a rank ≥ 0 and 0 < MS ≤ 10000 (a test hook: that rank's forward and "
                                      "backward blocks each take MS ms longer)");
        if (rank == env.rank) s.inject_compute_delay_s = ms / 1000;
    }
    const BackendChoice cpu_choice;
    const BackendChoice& backend = options.backend ? *options.backend : cpu_choice;
    if (backend.kind != BackendKind::cpu && s.cfg.flash_attention && !s.cfg.mixed()) {
        // The CUDA flash kernels store 16-bit (kernels/flash.cuh); the CPU backend's flash ops run in any precision.
        SourceLoc where{job.origin.file, 0, 0};
        if (auto it = job.origin.locations.find("training.flash_attention"); it != job.origin.locations.end())
            where = it->second;
        return setup_error(s,
                           fail(where, "training.flash_attention",
                                std::string("true with precision \"fp32\" on --backend ") + backend_kind_name(backend.kind) +
                                    "; allowed: precision \"bf16\" or \"fp16\" (the CUDA flash attention kernels store "
                                    "16-bit), flash_attention = false, or --backend cpu")
                               .error()
                               .one_line(),
                           2);
    }
    auto be = make_backend(backend, s.threads);
    if (!be) return setup_error(s, be.error().one_line(), 2);
    s.be = std::move(*be);
    s.backend = backend;
    // PTD_STREAM_CHECK=1: check the stream/event contract (stream_check.cpp).
    if (const char* v = std::getenv("PTD_STREAM_CHECK"); v && *v && std::strcmp(v, "0") != 0) {
        if (std::strcmp(v, "1") != 0)
            return setup_error(s, std::string("PTD_STREAM_CHECK: got \"") + v +
                                      "\"; allowed: 1 (check that every communicator read waits for the compute work that wrote its buffer) or 0 / unset (off)");
        s.be = make_stream_checking_backend(std::move(s.be));
    }
    // PTD_CUDA_GRAPHS=1: each step captures micro-batch 0 as a CUDA graph and replays it for
    // every micro-batch (run_pipeline_step). Only where a micro-batch is one stretch of
    // compute-stream work: one pipeline stage and no tensor-parallel collectives inside it.
    if (const char* v = std::getenv("PTD_CUDA_GRAPHS"); v && *v && std::strcmp(v, "0") != 0) {
        if (std::strcmp(v, "1") != 0)
            return setup_error(s, std::string("PTD_CUDA_GRAPHS: got \"") + v +
                                      "\"; allowed: 1 (capture a micro-batch as a CUDA graph and replay it) or 0 / unset (off)",
                               2);
        if (!s.be->graphs())
            return setup_error(s, std::string("PTD_CUDA_GRAPHS=1: the ") + s.be->name() +
                                      " backend has no CUDA graphs; allowed with --backend cuda or cuda-sim",
                               2);
        if (s.cfg.tp > 1 || s.cfg.pp > 1)
            return setup_error(s, "PTD_CUDA_GRAPHS=1: the job has tp = " + std::to_string(s.cfg.tp) + " and pp = " +
                                      std::to_string(s.cfg.pp) +
                                      ", so a micro-batch's work is split by communication the engine does not capture; "
                                      "allowed: tp = 1 and pp = 1 (data parallelism is fine: its reduction follows the "
                                      "micro-batches)",
                               2);
        s.cuda_graphs = true;
    }

    // GPU memory the tagged allocator cannot see: readings around communicator set-up.
    auto mem_reading = [&]() -> std::optional<DeviceMemInfo> {
        int64_t f = 0, t = 0;
        if (!s.be->device_mem_info(&f, &t)) return std::nullopt;
        return DeviceMemInfo{f, t};
    };
    s.device_mem.at_start = s.device_mem.before_comm = mem_reading();
    if (int rc = connect_run(s)) return rc;
    s.device_mem.after_comm = mem_reading();
    // Which ranks share this machine, from every rank's host and mask: LOCAL_WORLD_SIZE counts a
    // layout node's ranks (a 2-node job on one workstation is two nodes of one rank), and one
    // mask cannot tell its own cores from a shared cpuset. Default threads follow the share.
    s.host_cores = host_cores_of_rank(*s.be, *s.groups.world, env.rank, env.world_size);
    if (!s.threads_given && s.host_cores.share >= 0) {
        const int t = compute_threads_for_share(s.host_cores.share, cpu_quota_cores(), s.host_cores.ranks_on_machine);
        if (t != s.threads && s.be->set_compute_threads(t)) s.threads = t;
    }
    // The communicator tells the backend what it reads (checked in PTD_STREAM_CHECK mode).
    for (Communicator* g : {s.groups.world.get(), s.groups.tp.get(), s.groups.pp.get(), s.groups.dp.get(),
                            s.groups.embedding.get()})
        if (g) g->set_access_observer([be = s.be.get()](const void* x, size_t n, bool write, const char* op) {
                be->note_comm_access(x, n, write, op);
            });
    return 0;
}

}  // namespace

ConnectedRank::~ConnectedRank() = default;

int connect_rank(const JobSpec& job, const RankEnv& env, const TrainOptions& options, ConnectedRank& out) {
    RunState s;
    if (int rc = setup_connected(s, job, env, options)) return rc;
    out.layout = std::move(s.layout);
    out.cfg = s.cfg;
    out.threads = s.threads;
    out.host_cores = s.host_cores;
    out.run_id = s.run_id;
    out.be = std::move(s.be);
    out.server = std::move(s.server);
    out.store = std::move(s.store);
    out.groups = std::move(s.groups);
    return 0;
}

void disconnect_rank(ConnectedRank& r) {
    r.groups.world->barrier();
    if (r.store) r.store->goodbye();
    if (r.server && !r.server->wait_all_goodbye(30.0))
        std::fprintf(stderr, "ptd-engine: rank 0: warning: not every rank said goodbye within 30 s; closing the store anyway\n");
}

int run_training(const JobSpec& job, const RankEnv& env, const TrainOptions& options) {
    RunState s;
    if (int rc = setup_connected(s, job, env, options)) return rc;
    s.run_dir = options.run_dir.empty() ? "runs/" + s.run_id : options.run_dir;
    // The launcher saves its record of a restart before the attempt's ranks start; a record
    // being replaced at this very instant is read again a moment later.
    for (int tries = 0; tries < 20 && !s.restarts_at_start; ++tries) {
        s.restarts_at_start = restarts_recorded(s.run_dir);
        if (!s.restarts_at_start) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }

    const std::string job_dir = options.job_path.empty() ? "." : fs::path(options.job_path).parent_path().string();
    auto data = open_token_source(job.training.data, job.model.vocab, (uint64_t)job.training.seed, job_dir);
    if (!data) return run_failure(s, data.error().one_line());
    s.data = std::move(*data);
    if (auto ok = s.data->check_length(s.cfg.seq); !ok) return run_failure(s, ok.error().one_line());

    compute_prediction(s);
    s.model = build_model(*s.be, s.cfg, (uint64_t)job.training.seed);
    s.acts = alloc_activations(*s.be, s.cfg);
    s.optim = make_optimizer(*s.be, s.model, (float)s.job.training.weight_decay);
    if (s.cfg.first || s.cfg.last)
        s.host_tokens = (int32_t*)s.be->alloc_host(
            (size_t)s.cfg.grad_accum * s.cfg.micro_batch * (s.cfg.seq + 1) * sizeof(int32_t), "token ids (host staging)");
    s.host_scalars = (double*)s.be->alloc_host(sizeof(double) * STEP_SCALAR_COUNT, "step scalars (host staging)");
    if (options.resume)
        if (int rc = resume_run(s)) return rc;
    // Planned memory: everything is allocated by now; from here on an allocation (in an op,
    // in a step) stops the rank naming the buffer.
    s.be->seal_allocations(true);
    emit_start(s);
    if (env.rank == 0)
        log_line(s, "training " + job.model.name + " on " + std::to_string(env.world_size) + " rank(s): tp " +
                        std::to_string(s.cfg.tp) + " · pp " + std::to_string(s.cfg.pp) + " · dp " +
                        std::to_string(s.cfg.dp) + ", " + s.data->describe() + ", run dir " + s.run_dir +
                        ", backend " + s.backend.describe());
    else if (s.backend.kind == BackendKind::cuda)
        log_line(s, "backend " + s.backend.describe());  // every rank's GPU, not only rank 0's

    const int64_t stop = options.stop_at_step >= 0 ? options.stop_at_step : job.training.steps;
    const auto t_run = clock_type::now();
    const int64_t first_step = s.step;
    if (options.timeline_steps != 0) {
        // Every rank writes its own file; the folder may already exist (a peer made it, or a resume).
        const std::string dir = options.timeline_dir.empty() ? s.run_dir + "/timeline" : options.timeline_dir;
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) return run_failure(s, "measured timeline: cannot create " + dir + ": " + ec.message());
        auto w = TimelineWriter::open(dir + "/" + timeline_file_name(env.rank),
                                      {env.rank, s.cfg.pp_rank, s.cfg.dp_rank, s.cfg.tp_rank, 0});
        if (!w) return run_failure(s, w.error().one_line());
        s.timeline.emplace(std::move(*w));
        s.timeline_first_step = s.step;
    }
    while (s.step < stop) {
        train_one_step(s);
        if (options.checkpoint_every > 0 && (s.step % options.checkpoint_every == 0 || s.step == stop))
            write_checkpoint(s);
    }

    nlohmann::json j = metrics_event(s.src, "end");
    j["step"] = s.step;
    j["steps_run"] = s.step - first_step;
    j["seconds"] = since(t_run);
    j["memory"] = memory_json(s.be->mem_stats(), s.predicted, s.predicted_total);
    emit_metrics_line(j);
    // Orderly end: nobody leaves while a peer may still talk to it, and rank 0's store
    // stays up until every rank said goodbye.
    s.groups.world->barrier();
    if (s.store) s.store->goodbye();
    if (s.server && !s.server->wait_all_goodbye(30.0)) {
        const std::string msg = "not every rank said goodbye within 30 s after the last step; closing the store anyway";
        log_line(s, "warning: " + msg);
        nlohmann::json w = metrics_event(s.src, "warning");
        w["message"] = msg;
        emit_metrics_line(w);
    }
    teardown(s);
    return 0;
}

}  // namespace ptd::engine
