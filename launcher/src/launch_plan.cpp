// launch_plan.cpp — what a launch will run where: ranks on hosts (from the same
// make_layout as the estimators), the engine's environment contract, the exact command
// of every rank, the dry run and the Slurm script. Pure: no processes, no network.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>

#include "ptd/common/file_read.h"
#include "ptd/layout/job_layout.h"
#include "ptd/launch.h"
#include "ptd/layout/layout.h"
#include "ptd/restart.h"
#include "transport.h"

extern char** environ;

namespace ptd {
namespace fs = std::filesystem;

std::string shell_quote(std::string_view s) {
    // Plain words stay readable in dry runs; everything else goes in single quotes, where
    // the shell interprets nothing, and a ' becomes '\'' (close, escaped quote, reopen).
    bool plain = !s.empty();
    for (char c : s)
        if (!(std::isalnum((unsigned char)c) || std::strchr("@%+=:,./_-", c))) plain = false;
    if (plain) return std::string(s);
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') out += "'\\''";
        else out += c;
    }
    return out + "'";
}

static bool valid_env_name(std::string_view n) {
    if (n.empty() || std::isdigit((unsigned char)n[0])) return false;
    for (char c : n)
        if (!(std::isalnum((unsigned char)c) || c == '_')) return false;
    return true;
}

std::vector<std::pair<std::string, std::string>> forwarded_environment(const JobSpec& job) {
    std::vector<std::pair<std::string, std::string>> out;
    std::set<std::string> seen;
    auto add = [&](const std::string& name, const char* value) {
        if (value && seen.insert(name).second) out.emplace_back(name, value);
    };
    // Prefixes first, in a stable order (environ order differs between shells).
    std::vector<std::string> prefixed;
    for (char** e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        const size_t eq = kv.find('=');
        if (eq == std::string_view::npos) continue;
        std::string name(kv.substr(0, eq));
        if (name.starts_with("NCCL_") || name.starts_with("GLOO_")) prefixed.push_back(name);
    }
    std::sort(prefixed.begin(), prefixed.end());
    for (const std::string& n : prefixed) add(n, std::getenv(n.c_str()));
    add("OMP_NUM_THREADS", std::getenv("OMP_NUM_THREADS"));
    for (const std::string& n : job.launch.env) add(n, std::getenv(n.c_str()));
    return out;
}

// The engine binary on this machine: an explicit path, a path in launch.engine, the
// ptd-engine next to this executable (a build or install tree), or launch.engine on PATH.
static std::string find_local_engine(const JobSpec& job, const LaunchOptions& opts) {
    auto executable = [](const fs::path& p) { return !p.empty() && access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); };
    if (!opts.local_engine.empty()) return executable(opts.local_engine) ? fs::absolute(opts.local_engine).string() : "";
    const std::string& e = job.launch.engine;
    if (e.find('/') != std::string::npos) return executable(e) ? fs::absolute(e).string() : "";
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec && executable(self.parent_path() / e)) return (self.parent_path() / e).string();
    if (const char* path = std::getenv("PATH")) {
        std::stringstream ss(path);
        for (std::string dir; std::getline(ss, dir, ':');)
            if (!dir.empty() && executable(fs::path(dir) / e)) return fs::absolute(fs::path(dir) / e).string();
    }
    return "";
}

// Unique per process and second; a process that launches more than once (the studio)
// numbers its later runs, since run directories are never reused.
static std::string make_run_id() {
    static std::atomic<int> launches{0};
    const int n = ++launches;
    char buf[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
    return std::string(buf) + "-" + std::to_string(getpid()) + (n > 1 ? "-" + std::to_string(n) : "");
}

static int pick_local_free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, (sockaddr*)&a, sizeof a) == 0 && getsockname(fd, (sockaddr*)&a, &len) == 0) port = ntohs(a.sin_port);
    close(fd);
    return port;
}

// The folder relative paths in the job are relative to: the job file's, else the current one.
static fs::path job_folder(const JobSpec& job) {
    if (!job.origin.file.empty() && job.origin.file[0] != '<') return fs::absolute(job.origin.file).parent_path();
    return fs::current_path();
}

namespace {
// One path-valued key of the job: how to reach its value, whether it is set, and whether
// it is part of the job's definition (sent with job.toml) or payload (sent with --upload).
struct PathKey {
    const char* key;
    const std::string& (*get)(const JobSpec&);
    std::string& (*set)(JobSpec&);
    bool (*in_use)(const JobSpec&);
    bool always_sent;
};
const PathKey kPathKeys[] = {
    // save_job_toml writes hf_config only while the model is the imported one.
    {"model.hf_config", [](const JobSpec& j) -> const std::string& { return j.origin.model_hf_config; },
     [](JobSpec& j) -> std::string& { return j.origin.model_hf_config; },
     [](const JobSpec& j) { return !j.origin.model_hf_config.empty() && j.origin.model_base.has_value(); }, true},
    {"training.data", [](const JobSpec& j) -> const std::string& { return j.training.data; },
     [](JobSpec& j) -> std::string& { return j.training.data; },
     [](const JobSpec& j) { return !j.training.data.empty() && j.training.data != "synthetic"; }, false},
    // The ranks do not read it; the run's job.toml names it absolutely so that it still
    // resolves from the run directory (ptd estimate RUN_DIR/job.toml).
    {"cluster.profile", [](const JobSpec& j) -> const std::string& { return j.cluster.profile; },
     [](JobSpec& j) -> std::string& { return j.cluster.profile; },
     [](const JobSpec& j) { return !j.cluster.profile.empty(); }, false},
};
}  // namespace

std::vector<JobFileRef> job_file_refs(const JobSpec& job) {
    std::vector<JobFileRef> out;
    const fs::path base = job_folder(job);
    for (const PathKey& k : kPathKeys) {
        if (!k.in_use(job)) continue;
        JobFileRef ref;
        ref.key = k.key;
        ref.written = k.get(job);
        // As the job loader and the engine read it: no "~" expansion.
        const fs::path p(ref.written);
        std::error_code ec;
        fs::path abs = p.is_absolute() ? p : base / p;
        fs::path canon = fs::weakly_canonical(abs, ec);
        ref.path = (ec ? abs.lexically_normal() : canon).string();
        ref.always_sent = k.always_sent;
        out.push_back(std::move(ref));
    }
    return out;
}

// The job with every referenced file named as `name_of` says.
static std::string job_with_paths(JobSpec job, const std::vector<JobFileRef>& refs,
                                  const std::function<std::string(const JobFileRef&)>& name_of) {
    for (const JobFileRef& ref : refs)
        for (const PathKey& k : kPathKeys)
            if (ref.key == k.key) k.set(job) = name_of(ref);
    return save_job_toml(job);
}

// SSH: which files go next to job.toml on every host, under which names (the file's own
// name unless two files share one, or it is one of the run's own files).
static void name_remote_copies(std::vector<JobFileRef>& refs, bool upload) {
    std::set<std::string> taken = {"job.toml", "ptd-engine", "checkpoints"};
    for (size_t i = 0; i < refs.size(); ++i) {
        JobFileRef& ref = refs[i];
        if (!ref.always_sent && !upload) continue;
        std::string name = fs::path(ref.path).filename().string();
        if (name.empty() || name == "." || name == "..") name = "file";
        std::string unique = name;
        for (int n = 2; taken.count(unique); ++n) unique = std::to_string(n) + "-" + name;
        taken.insert(unique);
        ref.remote_name = unique;
    }
}

std::string run_id_problem(const std::string& id) {
    constexpr size_t kMaxRunId = 128;
    bool ok = !id.empty() && id.size() <= kMaxRunId && std::isalnum((unsigned char)id[0]);
    for (char c : id) ok = ok && (std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.');
    if (ok) return "";
    // The value as given, printable and bounded (it may hold newlines or be huge).
    std::string shown;
    for (size_t i = 0; i < id.size() && i < 64; ++i) {
        const unsigned char c = (unsigned char)id[i];
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            shown += buf;
        } else {
            shown += (char)c;
        }
    }
    if (id.size() > 64) shown += "…";
    return "got \"" + shown + "\"" + (id.size() > 64 ? " (" + std::to_string(id.size()) + " bytes)" : "") +
           "; allowed: one folder name under the run root, 1 to " + std::to_string(kMaxRunId) +
           " letters, digits, '.', '_' or '-', starting with a letter or digit (not \".\", \"..\" or a path)";
}

// A host name or address the ranks can be given as MASTER_ADDR; "" when fine.
static std::string master_addr_problem(const std::string& a) {
    if (a.empty()) return "empty; allowed: a host name or IP address of the first host";
    if (a.size() > 253) return "is " + std::to_string(a.size()) + " characters long; allowed: a host name (at most 253) or IP address";
    if (a[0] == '-') return "got \"" + a + "\"; allowed: a host name or IP address (not starting with '-')";
    for (char c : a)
        if ((unsigned char)c <= ' ' || c == 0x7f || c == '/' || c == '@')
            return "got \"" + a.substr(0, 64) + "\"; allowed: a host name or IP address (no spaces, control characters, '/' or '@')";
    return "";
}

// The value of a --backend among the extra engine arguments ("" = none).
static std::string backend_in_engine_args(const std::vector<std::string>& args) {
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--backend") return i + 1 < args.size() ? args[i + 1] : std::string();  // the engine says it lacks a value
        if (args[i].starts_with("--backend=")) return args[i].substr(10);
    }
    return "";
}

std::string rank_backend(const LaunchPlan& plan) {
    if (!plan.backend.empty()) return plan.backend;
    const std::string in_args = backend_in_engine_args(plan.engine_args);
    return in_args.empty() ? "auto" : in_args;
}

// env, argv and the remote command line of every rank, from the plan's current fields.
static void fill_rank_commands(LaunchPlan& plan) {
    const std::string port = plan.master_port ? std::to_string(plan.master_port) : "<chosen at launch>";
    const auto forwarded = forwarded_environment(plan.job);
    for (RankPlan& r : plan.ranks) {
        const HostPlan& h = plan.hosts[r.host];
        r.env = {{"RANK", std::to_string(r.rank)},
                 {"WORLD_SIZE", std::to_string(plan.ranks.size())},
                 {"LOCAL_RANK", std::to_string(r.local_rank)},
                 {"LOCAL_WORLD_SIZE", std::to_string(h.ranks.size())},
                 {"MASTER_ADDR", plan.master_addr},
                 {"MASTER_PORT", port},
                 {"PTD_RUN_ID", plan.run_id}};
        // GPUs: no CUDA_VISIBLE_DEVICES. Every rank sees every GPU of its host and the engine
        // picks device LOCAL_RANK, so NCCL can find the peers' GPUs and use NVLink / P2P
        // (narrowing each rank to one device hides them: NVIDIA/nccl #129, #324, #1066).
        for (const auto& kv : forwarded) r.env.push_back(kv);

        const std::string job_path = plan.local ? plan.run_dir + "/job.toml" : h.remote_dir + "/job.toml";
        r.argv = {h.engine, "--job", job_path, "--run-dir", plan.run_dir};
        if (plan.steps > 0) {
            r.argv.push_back("--steps");
            r.argv.push_back(std::to_string(plan.steps));
        }
        if (!plan.backend.empty()) {
            r.argv.push_back("--backend");
            r.argv.push_back(plan.backend);
        }
        // Over SSH each host writes its measured timeline into its own folder; the launcher
        // collects the files into RUN_DIR/timeline when the ranks are done (launcher.cpp).
        if (!plan.local) {
            r.argv.push_back("--timeline-dir");
            r.argv.push_back(h.remote_dir + "/timeline");
        }
        if (plan.checkpoint_every > 0) {
            r.argv.push_back("--checkpoint-every");
            r.argv.push_back(std::to_string(plan.checkpoint_every));
        }
        if (plan.resume) r.argv.push_back("--resume");
        for (const std::string& a : plan.engine_args) r.argv.push_back(a);
        for (const std::string& a : plan.layout_overrides) r.argv.push_back(a);  // last: they win

        // sshd starts the command in a new session, so the shell's pid ($$) is also the
        // process group of everything the rank starts; exec keeps that pid for the engine.
        // The launcher reads the pid line to signal the whole group later.
        std::string cmd = "printf 'ptd-launch-pid %d\\n' \"$$\" >&2;";
        // The run's secret arrives as the first line on stdin (ssh_transport.cpp), so that it
        // is in no command line a `ps` on the host could show.
        cmd += " IFS= read -r PTD_RUN_SECRET; export PTD_RUN_SECRET;";
        for (const auto& [k, v] : r.env) cmd += " export " + k + "=" + shell_quote(v) + ";";
        cmd += " exec";
        for (const std::string& a : r.argv) cmd += " " + shell_quote(a);
        r.shell_command = std::move(cmd);
    }
}

// plan.ranks from `layout`, each on the host of its node: `host_of_node[node]`, or the node
// itself when empty (every host of the plan in use).
static void place_ranks(LaunchPlan& plan, const RankLayout& layout, const std::vector<int>& host_of_node) {
    for (HostPlan& h : plan.hosts) h.ranks.clear();
    plan.ranks.assign((size_t)layout.world, RankPlan{});
    for (int r = 0; r < layout.world; ++r) {
        const RankPlace& p = layout.ranks[(size_t)r];
        RankPlan& rp = plan.ranks[(size_t)r];
        rp.rank = r;
        rp.host = host_of_node.empty() ? p.node : host_of_node[(size_t)p.node];
        rp.local_rank = p.local_gpu;
        rp.tp = p.coord[DIM_TP];
        rp.pp = p.coord[DIM_PP];
        rp.dp = p.coord[DIM_DP];
        plan.hosts[(size_t)rp.host].ranks.push_back(r);
    }
}

void set_master_port(LaunchPlan& plan, int port) {
    plan.master_port = port;
    fill_rank_commands(plan);
}

void refresh_rank_commands(LaunchPlan& plan) { fill_rank_commands(plan); }

Result<std::string> plan_without_host(LaunchPlan& plan, int host) {
    const SourceLoc here{};
    if (host < 0 || host >= (int)plan.hosts.size() || plan.hosts[(size_t)host].excluded)
        return fail(here, "--exclude-failed", "the failure names no host of the run to leave out");
    std::vector<int> left;  // the hosts the next attempt runs on, in order
    for (int h = 0; h < (int)plan.hosts.size(); ++h)
        if (h != host && !plan.hosts[(size_t)h].excluded) left.push_back(h);
    if (left.empty()) return fail(here, "--exclude-failed", "no host is left to run on");
    JobSpec job = plan.job;
    const int world = (int)left.size() * job.cluster.gpus_per_node;
    const int model_parallel = job.parallel.tp * job.parallel.pp * job.parallel.cp;
    const std::string hosts_text = std::to_string(left.size()) + " host" + (left.size() == 1 ? "" : "s");
    const std::string what = hosts_text + " left " + (left.size() == 1 ? "holds " : "hold ") + std::to_string(world) + " rank" +
                             (world == 1 ? "" : "s");
    if (model_parallel <= 0 || world % model_parallel != 0)
        return fail(here, "--exclude-failed",
                    what + ", not a multiple of tp · pp · cp = " + std::to_string(model_parallel) + ": no layout of this job fits them");
    const int dp = world / model_parallel, was_dp = job.parallel.dp;
    const int global = job.training.global_batch, micro = job.training.micro_batch;
    if (micro <= 0 || global % (dp * micro) != 0)
        return fail(here, "--exclude-failed",
                    what + ": dp " + std::to_string(dp) + " × micro_batch " + std::to_string(micro) +
                        " does not divide the global batch of " + std::to_string(global) +
                        " sequences, so no gradient accumulation keeps it");
    const int accum = global / (dp * micro);
    if (job.parallel.vpp > 1 && accum % job.parallel.pp != 0)
        return fail(here, "--exclude-failed",
                    what + ": dp " + std::to_string(dp) + " runs " + std::to_string(accum) +
                        " micro-batches per replica, not a multiple of pp = " + std::to_string(job.parallel.pp) +
                        " as the interleaved schedule needs");
    job.parallel.dp = dp;
    job.cluster.nodes = (int)left.size();
    auto layout = job_layout(job);
    if (!layout) return fail(here, "--exclude-failed", what + ": " + layout.error().one_line());

    plan.layout_overrides = {"--set", "cluster.nodes=" + std::to_string(left.size()), "--set",
                             "parallel.dp=" + std::to_string(dp), "--set", "training.global_batch=" + std::to_string(global)};
    const int was_accum = plan.job.grad_accum();
    plan.job = job;
    plan.hosts[(size_t)host].excluded = true;
    place_ranks(plan, *layout, left);
    // The store runs with rank 0, now on the first host left.
    if (!plan.local && !plan.master_addr_given && left.front() != 0) {
        plan.master_addr = ssh_reached_host(plan.hosts[(size_t)left.front()].entry.host, plan.ssh_config);
        plan.master_addr_source = "the first host left after --exclude-failed";
    }
    fill_rank_commands(plan);
    return "tp " + std::to_string(job.parallel.tp) + " · pp " + std::to_string(job.parallel.pp) + " · dp " +
           std::to_string(dp) + " on " + hosts_text + " (" + std::to_string(world) + " rank" + (world == 1 ? "" : "s") +
           "): the global batch of " + std::to_string(global) + " sequences as " + std::to_string(accum) +
           " micro-batch" + (accum == 1 ? "" : "es") + " of " + std::to_string(micro) + " per replica (was dp " +
           std::to_string(was_dp) + " with " + std::to_string(was_accum) + ")";
}

Result<LaunchPlan> make_launch_plan(const JobSpec& job, const LaunchOptions& opts) {
    // A job without [parallel] has only placeholder degrees (tp = pp = 1, dp = world).
    if (auto no_layout = require_layout(job, "`ptd launch`"); !no_layout.empty())
        return std::unexpected(Error(std::move(no_layout)));
    LaunchPlan plan;
    plan.job = job;
    // --hosts names machines to reach over SSH, whatever the job's mode says.
    const bool given_hosts = !opts.hostfile.empty() || !opts.hosts_text.empty();
    plan.local = (job.launch.mode == LaunchMode::local && !given_hosts) || opts.slurm;
    Result<std::vector<HostEntry>> hosts = std::vector<HostEntry>{};
    if (opts.slurm) {
        for (int n = 0; n < job.cluster.nodes; ++n) hosts->push_back(HostEntry{"node-" + std::to_string(n), "", 0, 0, 0});
    } else if (!opts.hosts_text.empty()) {
        hosts = parse_hostfile(opts.hosts_text, opts.hosts_label);
        if (hosts) hosts = check_hosts_for_job(job, std::move(*hosts), opts.hosts_label);
    } else {
        hosts = resolve_hosts(job, opts.hostfile);
    }
    if (!hosts) return std::unexpected(hosts.error());

    auto layout = job_layout(job);
    if (!layout) return std::unexpected(layout.error());

    plan.run_id = opts.run_id.empty() ? make_run_id() : opts.run_id;
    if (std::string why = run_id_problem(plan.run_id); !why.empty()) return fail(SourceLoc{}, "--run-id", why);
    const std::string root = opts.run_root.empty() ? job.launch.run_dir : opts.run_root;
    plan.run_dir = (fs::absolute(root) / plan.run_id).lexically_normal().string();
    // launch.identity is a file on this machine, named like every other path of the job:
    // relative to the job file's folder (as launch.hostfile), not to the current folder.
    if (std::string& id = plan.job.launch.identity; !id.empty() && fs::path(id).is_relative())
        id = (job_folder(job) / id).lexically_normal().string();
    plan.upload = opts.upload.value_or(job.launch.upload);
    plan.accept_new_host_keys = opts.accept_new_host_keys.value_or(job.launch.accept_new_host_keys);
    plan.known_hosts = opts.known_hosts;
    plan.ssh_config = opts.ssh_config;
    // Files libssh reads by itself: a FIFO there would hang the connect and /dev/zero would
    // grow libssh's buffers, so each must be a regular file of a sensible size (checked by
    // name here, before any host is contacted). known_hosts and the key may not exist yet.
    for (auto [path, key, kind] : {std::tuple{plan.ssh_config, "--ssh-config", file_kind::ssh_config},
                                   std::tuple{plan.job.launch.identity, "launch.identity", file_kind::ssh_identity},
                                   std::tuple{plan.known_hosts, "--known-hosts", file_kind::known_hosts}}) {
        std::error_code ec;
        if (path.empty() || path == "/dev/null") continue;  // `ssh -F /dev/null`: no config at all
        if (!fs::exists(path, ec) && !fs::is_symlink(path, ec) && key != std::string("--ssh-config")) continue;
        if (auto f = open_regular_file(path, kind, key); !f) return std::unexpected(f.error());
    }
    if (const char* k = std::getenv("PTD_SSH_KEEPALIVE_S")) {
        char* end = nullptr;
        const double v = std::strtod(k, &end);
        if (*k == '\0' || *end != '\0' || !std::isfinite(v) || v < 0.2 || v > 3600)
            return fail(SourceLoc{}, "PTD_SSH_KEEPALIVE_S",
                        "got " + quote_input(k) + "; allowed: seconds between SSH keepalives, 0.2 .. 3600");
    }
    plan.steps = opts.steps;
    plan.engine_args = opts.engine_args;
    plan.max_restarts = opts.max_restarts.value_or(job.launch.max_restarts);
    plan.checkpoint_every = opts.checkpoint_every.value_or(job.launch.checkpoint_every);
    plan.exclude_failed = opts.exclude_failed;
    if (plan.checkpoint_every > 0 &&
        std::find(opts.engine_args.begin(), opts.engine_args.end(), "--checkpoint-every") != opts.engine_args.end())
        return fail(SourceLoc{}, "--checkpoint-every",
                    "given twice: as " + std::string(opts.checkpoint_every ? "ptd launch --checkpoint-every" : "launch.checkpoint_every") +
                        " and after --; allowed: one of them");
    // --backend: checked here (a typo must not start N ranks that all fail) against the
    // names ptd-engine takes, and only once: `ptd launch --backend` or `-- --backend`.
    for (const auto& [given, where] : {std::pair{opts.backend, std::string("--backend")},
                                       std::pair{backend_in_engine_args(opts.engine_args), std::string("-- --backend")}}) {
        if (!given.empty() && given != "auto" && given != "cpu" && given != "cuda" && given != "cuda-sim")
            return fail(SourceLoc{}, where, "got " + quote_input(given) + "; allowed: auto, cpu, cuda, cuda-sim");
    }
    if (!opts.backend.empty() && !backend_in_engine_args(opts.engine_args).empty())
        return fail(SourceLoc{}, "--backend",
                    "given twice (--backend " + opts.backend + " and -- --backend " +
                        backend_in_engine_args(opts.engine_args) + "); allowed: one of them");
    plan.backend = opts.backend;
    for (const std::string& n : job.launch.env)
        if (!valid_env_name(n))
            return fail(job.where("launch.env"), "launch.env",
                        "got \"" + n + "\"; allowed: environment variable names ([A-Za-z_][A-Za-z0-9_]*)");

    if (plan.local || plan.upload) {
        plan.local_engine = find_local_engine(job, opts);
        if (plan.local_engine.empty() && opts.slurm) plan.local_engine = job.launch.engine;  // from PATH on the nodes
        if (plan.local_engine.empty()) {
            const std::string given = opts.local_engine.empty() ? job.launch.engine : opts.local_engine;
            return fail(job.where("launch.engine"), "launch.engine",
                        "no executable \"" + given + "\" found (tried " +
                            (given.find('/') != std::string::npos ? "that path"
                                                                  : "next to this program and on PATH") +
                            "); allowed: a path to ptd-engine, or build it first (cmake --build build)");
        }
    }

    for (size_t i = 0; i < hosts->size(); ++i) {
        HostPlan h;
        h.entry = (*hosts)[i];
        if (!plan.local) {
            if (h.entry.user.empty()) h.entry.user = job.launch.user;
            if (h.entry.port == 0 && job.launch.port != 22) h.entry.port = job.launch.port;
        }
        h.display = opts.slurm   ? h.entry.host  // a node of the allocation
                    : plan.local ? h.entry.host + " (local)"
                               : (h.entry.user.empty() ? "" : h.entry.user + "@") + h.entry.host +
                                     (h.entry.port ? ":" + std::to_string(h.entry.port) : "");
        // Each host gets its own copy of the job (and engine) under the run directory's
        // path, so two "hosts" that are one machine never overwrite each other's files.
        h.remote_dir = plan.local ? plan.run_dir : plan.run_dir + "/host-" + std::to_string(i);
        h.engine = plan.local ? plan.local_engine : plan.upload ? h.remote_dir + "/ptd-engine" : job.launch.engine;
        plan.hosts.push_back(std::move(h));
    }

    place_ranks(plan, *layout, {});

    // MASTER_ADDR: what the user set, else this machine, else the address the SSH
    // connection to the first host reaches (an ssh config alias's HostName: the alias
    // itself means nothing to the hosts' resolvers). Launcher::start checks on every host
    // that it resolves there.
    if (!opts.master_addr.empty()) {
        if (std::string why = master_addr_problem(opts.master_addr); !why.empty()) return fail(SourceLoc{}, "--master-addr", why);
        plan.master_addr = opts.master_addr;
        plan.master_addr_source = "--master-addr";
        plan.master_addr_given = true;
    } else if (!job.launch.master_addr.empty()) {
        if (std::string why = master_addr_problem(job.launch.master_addr); !why.empty())
            return fail(job.where("launch.master_addr"), "launch.master_addr", why);
        plan.master_addr = job.launch.master_addr;
        plan.master_addr_source = "launch.master_addr";
        plan.master_addr_given = true;
    } else if (opts.slurm) {
        plan.master_addr = "$(first node of the allocation)";
        plan.master_addr_source = "the allocation's first node (scontrol show hostnames)";
    } else if (plan.local) {
        plan.master_addr = "127.0.0.1";
        plan.master_addr_source = "this machine (local run)";
    } else {
        const std::string& first = plan.hosts[0].entry.host;
        plan.master_addr = ssh_reached_host(first, plan.ssh_config);
        plan.master_addr_source = plan.master_addr == first ? "the first host"
                                  : "HostName of the first host \"" + first + "\" in " +
                                        (plan.ssh_config.empty() ? std::string("~/.ssh/config") : plan.ssh_config);
    }
    plan.master_port = job.launch.master_port;
    if (plan.master_port == 0 && plan.local) {
        plan.master_port = pick_local_free_port();
        if (plan.master_port == 0)
            return fail(job.where("launch.master_port"), "launch.master_port",
                        std::string("no free TCP port on 127.0.0.1 (") + std::strerror(errno) +
                            "); allowed: set launch.master_port");
    }
    // Files the job refers to: absolute in the run directory's job.toml; over SSH, copies
    // next to each host's job.toml (those files must exist here, as regular files).
    plan.files = job_file_refs(job);
    if (!plan.local) name_remote_copies(plan.files, plan.upload);
    for (const JobFileRef& ref : plan.files) {
        if (ref.remote_name.empty()) continue;
        std::error_code ec;
        if (!fs::is_regular_file(ref.path, ec))
            return fail(job.where(ref.key), ref.key,
                        "\"" + ref.written + "\" (" + ref.path + ") " + (fs::exists(ref.path, ec) ? "is not a regular file" : "does not exist") +
                            "; allowed: a file on this machine, which is sent to every host next to job.toml" +
                            (ref.always_sent ? "" : " (--upload)"));
    }
    plan.job_toml = job_with_paths(job, plan.files, [](const JobFileRef& r) { return r.path; });
    plan.remote_job_toml = job_with_paths(job, plan.files, [](const JobFileRef& r) {
        return r.remote_name.empty() ? r.path : r.remote_name;
    });
    fill_rank_commands(plan);
    return plan;
}

static std::string rank_span(const std::vector<int>& ranks) {
    if (ranks.empty()) return "none";
    bool contiguous = true;
    for (size_t i = 1; i < ranks.size(); ++i) contiguous &= ranks[i] == ranks[i - 1] + 1;
    if (contiguous) return ranks.size() == 1 ? std::to_string(ranks[0])
                                             : std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
    std::string s;
    for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
    return s;
}

std::string format_dry_run(const LaunchPlan& plan) {
    std::ostringstream o;
    o << "run " << plan.run_id << ": " << plan.ranks.size() << " rank(s) on " << plan.hosts.size() << " host(s), "
      << (plan.local ? "local child processes" : "ssh") << "\n";
    o << "run directory: " << plan.run_dir << "\n";
    if (plan.max_restarts > 0) o << restart_policy_line(plan) << "\n";
    if (!plan.slurm_preflight_ptd.empty())
        o << "preflight: in the sbatch script, every rank probes first (" << plan.run_dir << "/preflight), then "
          << plan.slurm_preflight_ptd << " calibrate --collect --check judges the nodes; "
          << (plan.slurm_preflight_force ? "--force: the ranks train whatever it says" : "a flagged node ends the job before training")
          << "\n";
    o << "master: " << plan.master_addr << ":"
      << (plan.master_port ? std::to_string(plan.master_port) : "(a free port found on the first host at launch)")
      << " (MASTER_ADDR from " << plan.master_addr_source << ")\n";
    if (!plan.local) {
        o << "files sent to each host (next to job.toml, SHA-256 checked): job.toml";
        for (const JobFileRef& ref : plan.files)
            if (!ref.remote_name.empty()) o << ", " << ref.remote_name << " (" << ref.key << ": " << ref.path << ")";
        if (plan.upload) o << ", ptd-engine (" << plan.local_engine << ")";
        o << "\n";
        for (const JobFileRef& ref : plan.files)
            if (ref.remote_name.empty())
                o << "not sent (without --upload): " << ref.key << " " << ref.path
                  << " must exist at that path on every host\n";
    } else {
        for (const JobFileRef& ref : plan.files) o << ref.key << ": " << ref.path << "\n";
    }
    // The backend every rank is told to use, and what that means for this job.
    const bool gpus = plan.job.cluster.gpu.name != "cpu";
    std::string backend = plan.backend, backend_from = "ptd launch --backend";
    if (backend.empty()) {
        backend = backend_in_engine_args(plan.engine_args);
        backend_from = "the engine arguments after --";
    }
    if (backend.empty()) {
        backend = "auto";
        backend_from = "ptd-engine's default";
    }
    o << "backend: --backend " << backend << " (" << backend_from << "): ";
    if (backend == "auto" && gpus)
        o << "cuda on each rank's GPU; a host whose ptd-engine lacks CUDA or sees no GPU refuses the job "
             "(--backend cpu runs its layout on CPUs on purpose)\n";
    else if (backend == "auto")
        o << "cpu (cluster.gpu = \"cpu\")\n";
    else if (backend == "cuda")
        o << "every rank must see its GPU, else it exits saying why\n";
    else if (backend == "cuda-sim")
        o << "the CUDA simulator on each host's CPU\n";
    else
        o << "the CPU backend\n";
    for (size_t h = 0; h < plan.hosts.size(); ++h) {
        const HostPlan& hp = plan.hosts[h];
        o << "\nhost " << h << " " << hp.display << ": ranks " << rank_span(hp.ranks) << "\n";
        for (int r : hp.ranks) {
            const RankPlan& rp = plan.ranks[r];
            o << "  rank " << r << " (tp " << rp.tp << ", pp " << rp.pp << ", dp " << rp.dp << ", local " << rp.local_rank
              << "):\n";
            // The device line: where the rank runs and which GPU it gets (every GPU of the
            // host stays visible; the engine takes device LOCAL_RANK).
            o << "    device: host " << hp.entry.host << ", LOCAL_RANK " << rp.local_rank << ", ";
            if (gpus)
                o << "every GPU of the host visible (cuda:" << rp.local_rank << " in the engine), --backend " << backend
                  << "\n    ";
            else
                o << "CUDA_VISIBLE_DEVICES not set (cluster.gpu = \"cpu\"), --backend " << backend << "\n    ";
            if (plan.local) {
                for (const auto& [k, v] : rp.env) o << k << "=" << shell_quote(v) << " ";
                for (size_t i = 0; i < rp.argv.size(); ++i) o << (i ? " " : "") << shell_quote(rp.argv[i]);
            } else {
                o << "ssh " << hp.display << " " << rp.shell_command;
            }
            o << "\n";
        }
    }
    return o.str();
}

// An #SBATCH line per [launch.slurm] key that is set (job_toml.cpp checked each value's
// form and characters).
static void sbatch_options(std::ostringstream& o, const SlurmSpec& s) {
    const std::pair<const char*, const std::string*> valued[] = {
        {"partition", &s.partition}, {"account", &s.account},   {"qos", &s.qos},         {"time", &s.time},
        {"mem", &s.mem},             {"constraint", &s.constraint}, {"nodelist", &s.nodelist}, {"exclude", &s.exclude}};
    for (const auto& [name, value] : valued)
        if (!value->empty()) o << "#SBATCH --" << name << "=" << *value << "\n";
    if (s.exclusive) o << "#SBATCH --exclusive\n";
    if (s.cpus_per_task > 0) o << "#SBATCH --cpus-per-task=" << s.cpus_per_task << "\n";
    for (const std::string& line : s.extra_sbatch) o << "#SBATCH " << line << "\n";
}

// --exclude-failed under Slurm: the layout of each count of nodes left, planned when the script
// is written with plan_without_host's rules (one failure leaves out one node, so a budget of N
// restarts needs the counts nodes−1 … nodes−N), ending at the first count no layout fits. Which
// node goes does not change the layout: the nodes are alike, and ranks are placed in order.
struct SlurmLayoutRow {
    int nodes_left = 0;
    int tasks = 0;                        // the ranks of the layout (srun --ntasks, WORLD_SIZE)
    std::vector<std::string> overrides;   // its `--set key=value` arguments for every rank
    std::string text;                     // plan_without_host's "tp 2 · pp 2 · dp 1 on 1 host …"
    std::string why;                      // else: why no layout fits that many nodes
};

static std::vector<SlurmLayoutRow> slurm_layouts(const LaunchPlan& plan) {
    std::vector<SlurmLayoutRow> rows;
    LaunchPlan left = plan;
    const int nodes = (int)plan.hosts.size();
    for (int k = 1; k <= std::min(plan.max_restarts, nodes); ++k) {
        SlurmLayoutRow row;
        row.nodes_left = nodes - k;
        auto text = plan_without_host(left, nodes - k);
        if (!text) {
            row.why = text.error().diagnostics.front().message;
            rows.push_back(std::move(row));
            break;
        }
        row.tasks = (int)left.ranks.size();
        row.overrides = left.layout_overrides;
        row.text = *text;
        rows.push_back(std::move(row));
    }
    return rows;
}

// --exclude-failed: the bash that leaves the failed node out of the next step. The layouts are
// data (slurm_layouts); the script only picks the row for the nodes left.
static void slurm_exclusion_functions(std::ostringstream& o, const LaunchPlan& plan) {
    o << "# --exclude-failed: the node of the failed rank is left out of every later step (srun --exclude),\n"
      << "# which runs the layout planned below for the nodes left (ptd launch planned each with\n"
      << "# plan_without_host: the same tp · pp · cp and global batch, dp from the ranks left).\n"
      << "nodes=($(scontrol show hostnames \"$SLURM_JOB_NODELIST\"))  # a node's index is its host in restarts.jsonl\n"
      << "excluded=() placement=() layout=() layout_text=\"\"\n"
      << "layout_for() {  # $1 nodes left: sets tasks, layout and layout_text, or why no layout fits\n"
      << "    why=\"\"\n"
      << "    case $1 in\n";
    for (const SlurmLayoutRow& row : slurm_layouts(plan)) {
        o << "        " << row.nodes_left << ") ";
        if (!row.why.empty()) {
            o << "why=" << shell_quote(row.why) << " ;;\n";
            continue;
        }
        o << "tasks=" << row.tasks << "; layout=(";
        for (size_t i = 0; i < row.overrides.size(); ++i) o << (i ? " " : "") << shell_quote(row.overrides[i]);
        o << "); layout_text=" << shell_quote(row.text) << " ;;\n";
    }
    o << "        *) why=\"no layout was planned for $1 nodes\" ;;\n"
      << "    esac\n"
      << "}\n"
      << "node_index() {  # the index of node $1 in the allocation, else -1\n"
      << "    local i; for i in \"${!nodes[@]}\"; do [[ ${nodes[$i]} == \"$1\" ]] && { echo \"$i\"; return; }; done; echo -1\n"
      << "}\n";
    if (!plan.master_addr_given)
        o << "first_node_left() {  # rank 0's node after an exclusion, where the store moves (MASTER_ADDR)\n"
          << "    local n; for n in \"${nodes[@]}\"; do [[ \" ${excluded[*]} \" == *\" $n \"* ]] || { echo \"$n\"; return; }; done\n"
          << "}\n";
}

// --max-restarts under Slurm (docs/launcher.md, "Restart under Slurm"): the training step
// (one srun, every rank: `srun_head` its srun and options, `rest` the command of each task) in
// a loop inside the batch job. A step that fails is followed by a fresh srun step in the same
// allocation, with --resume when a complete checkpoint exists (the engine takes the newest one,
// find_latest_checkpoint) — no requeue, so the job keeps its nodes and its place instead of
// waiting in the queue again. Each restart is a JSON line of RUN_DIR/restarts.jsonl (the
// manifest's restart objects, restart.h), which RunFollower reads for `ptd watch` and the
// studio; the rank logs are appended to (--open-mode=append) so they keep every attempt, as
// the local launcher's do. Same rules as RestartTracker: a rank that exits with code 2 (a bad
// job or flag) is not restarted, nor is anything after the budget; with --exclude-failed the
// next step runs without the failed rank's node, or the job stops saying why no layout fits.
static void slurm_restart_loop(std::ostringstream& o, const LaunchPlan& plan, const std::string& srun_head,
                               const std::string& rest) {
    const std::string n = std::to_string(plan.max_restarts);
    const bool exclude = plan.exclude_failed;
    o << "\n# Automatic restart (--max-restarts " << n << "; docs/launcher.md, \"Restart under Slurm\"): a failed step\n"
      << "# is followed by a fresh srun step in this allocation that resumes from the newest complete\n"
      << "# checkpoint; each restart is a line of restarts.jsonl (shown by ptd watch). One task per rank;\n"
      << "# stdout and stderr of rank r are appended to rank-r.log, as with ptd launch.\n"
      << "run_dir=" << shell_quote(plan.run_dir) << "\n"
      << "newest_checkpoint() {  # the step of the newest step-N folder with its manifest.json, else 0\n"
      << "    local best=0 f s\n"
      << "    for f in \"$run_dir\"/checkpoints/step-*/manifest.json; do\n"
      << "        s=${f%/manifest.json}; s=${s##*/step-}\n"
      << "        if [[ -f $f && $s =~ ^[0-9]+$ ]] && (( 10#$s > best )); then best=$((10#$s)); fi\n"
      << "    done\n"
      << "    echo \"$best\"\n"
      << "}\n"
      << "newest_step() {  # the newest step any rank reported (its \"event\":\"step\" lines), else 0\n"
      << "    { grep -h '\"event\":\"step\"' \"$run_dir\"/rank-*.log 2>/dev/null || true; } |\n"
      << "        { grep -o '\"step\":[0-9]*[,}]' || true; } | tr -dc '0-9\\n' | sort -n | tail -n 1 | grep . || echo 0\n"
      << "}\n";
    if (exclude) slurm_exclusion_functions(o, plan);
    o << "# A job Slurm requeued (a node lost) begins here again: its restarts so far still count.\n"
      << "attempt=$( { grep -c . \"$run_dir/restarts.jsonl\" 2>/dev/null || true; } | head -n 1); attempt=${attempt:-0}\n"
      << "began=$(date +%s)\n"
      << "while :; do\n"
      << "    from=$(newest_checkpoint)\n"
      << "    resume=(); if (( from > 0 )); then resume=(--resume); fi\n"
      << "    # A fresh store secret for every step, as ptd launch makes one for every start.\n"
      << "    export PTD_RUN_SECRET=\"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\"\n"
      << "    rc=0\n"
      << "    # srun's own messages (\"srun: error: NODE: task R: Killed\") are kept to name the rank.\n"
      << "    { srun_err=$(" << srun_head << (exclude ? " \"${placement[@]}\"" : "") << rest << " \"${resume[@]}\""
      << (exclude ? " \"${layout[@]}\"" : "") << " 2>&1 1>&3) || rc=$?; } 3>&1\n"
      << "    if [[ -n $srun_err ]]; then printf '%s\\n' \"$srun_err\" >&2; fi\n"
      << "    if (( rc == 0 )); then break; fi\n"
      << "    # RANK:NODE:REASON of each task srun names (the first of \"tasks 4-6\"). The failed rank is the first\n"
      << "    # that neither got srun's own SIGTERM nor exited 1 as the others do when the store aborts the run\n"
      << "    # over a dead peer; else the first named.\n"
      << "    failures=$(sed -n 's/^srun: error: \\([^:]*\\): tasks\\{0,1\\} \\([0-9]*\\)[-,0-9]*: \\(.*\\)$/\\2:\\1:\\3/p' <<<\"$srun_err\")\n"
      << "    failure=$( { grep -v -e ':Terminated$' -e ':Exited with exit code 1$' <<<\"$failures\" || true; } | head -n 1)\n"
      << "    [[ -n $failure ]] || failure=$(head -n 1 <<<\"$failures\")\n"
      << "    rank=-1 host=-1 node=\"\" reason=\"the srun step exited with code $rc\"\n"
      << "    if [[ -n $failure ]]; then\n"
      << "        rank=${failure%%:*}; failure=${failure#*:}; node=${failure%%:*}; node=${node//[\\\"\\\\]/}\n"
      << (exclude ? "        host=$(node_index \"$node\")" : "        host=$(( rank / LOCAL_WORLD_SIZE ))")
      << "; reason=\"rank $rank on ${failure%%:*}: ${failure#*:}\"\n"
      << "    fi\n"
      << "    reason=${reason//[\\\"\\\\]/}\n"
      << "    if [[ $reason == *': Exited with exit code 2' ]]; then\n"
      << "        echo \"ptd: $reason (a bad job or flag): a restart would fail the same way\" >&2; exit \"$rc\"\n"
      << "    fi\n"
      << "    if (( attempt >= " << n << " )); then echo \"ptd: $reason; no restart left ($attempt of " << n << " used)\" >&2; exit \"$rc\"; fi\n";
    if (exclude)
        o << "    if (( host < 0 )); then\n"
          << "        echo \"ptd: $reason; --exclude-failed: the failure names no node of the job to leave out; the run stops here\" >&2; exit \"$rc\"\n"
          << "    fi\n"
          << "    excluded+=(\"$node\")\n"
          << "    layout_for $(( ${#nodes[@]} - ${#excluded[@]} ))\n"
          << "    if [[ -n $why ]]; then\n"
          << "        echo \"ptd: $reason; --exclude-failed: without node $node: $why; the run stops here\" >&2; exit \"$rc\"\n"
          << "    fi\n"
          << "    placement=(--nodes=$(( ${#nodes[@]} - ${#excluded[@]} )) --ntasks=\"$tasks\" --exclude=\"$(IFS=,; echo \"${excluded[*]}\")\")\n"
          << "    export WORLD_SIZE=$tasks\n"
          << (plan.master_addr_given ? "" : "    export MASTER_ADDR=\"$(first_node_left)\"\n");
    o << "    attempt=$((attempt + 1))\n"
      << "    from=$(newest_checkpoint); failed_at=$(newest_step); (( failed_at > from )) || failed_at=$from\n"
      << "    # Lost: the wall time from the checkpoint's save (or this step's start) to the restart.\n"
      << "    now=$(date +%s); saved=$began\n"
      << "    if (( from > 0 )); then\n"
      << "        saved=$(stat -c %Y \"$run_dir/checkpoints/$(printf 'step-%08d' \"$from\")/manifest.json\" 2>/dev/null || echo 0)\n"
      << "        (( saved > began )) || saved=$began\n"
      << "    fi\n"
      << "    printf '{\"attempt\":%d,\"rank\":%d,\"host\":%d,\"reason\":\"%s\",\"time\":%d,\"failed_at_step\":%d,\"resumed_from\":%d,"
         "\"steps_lost\":%d,\"seconds_lost\":%d"
      << (exclude ? ",\"excluded_host\":%d,\"excluded_host_name\":\"%s\",\"layout\":\"%s\"" : "") << "}\\n' \\\n"
      << "        \"$attempt\" \"$rank\" \"$host\" \"$reason\" \"$now\" \"$failed_at\" \"$from\" $((failed_at - from)) $((now - saved))"
      << (exclude ? " \"$host\" \"$node\" \"$layout_text\"" : "") << " >>\"$run_dir/restarts.jsonl\"\n"
      << "    echo \"ptd: restart $attempt of " << n << ": $reason; resuming from step $from in a new srun step"
      << (exclude ? " without node $node: $layout_text" : "") << "\" >&2\n"
      << "    began=$now\n"
      << "done\n";
}

std::string slurm_script(const LaunchPlan& plan) {
    const JobSpec& job = plan.job;
    const SlurmSpec& slurm = job.launch.slurm;
    const bool gpus = job.cluster.gpu.name != "cpu";
    const bool container = !slurm.container_image.empty();
    std::ostringstream o;
    o << "#!/bin/bash\n"
      << "# sbatch script written by `ptd launch --slurm` for run " << plan.run_id << ": "
      << plan.ranks.size() << " ranks of ptd-engine, " << job.cluster.gpus_per_node << " per node.\n"
      << "# Submit with: sbatch " << shell_quote(plan.run_dir + "/sbatch.sh") << " (or ptd launch --slurm --submit)\n"
      << "# Watch with:  ptd watch " << shell_quote(plan.run_dir) << "\n"
      << "#SBATCH --job-name=" << shell_quote("ptd-" + job.model.name) << "\n"
      << "#SBATCH --nodes=" << job.cluster.nodes << "\n"
      << "#SBATCH --ntasks-per-node=" << job.cluster.gpus_per_node << "\n";
    if (gpus) o << "#SBATCH --gpus-per-node=" << job.cluster.gpus_per_node << "\n";
    sbatch_options(o, slurm);
    o << "#SBATCH --output=" << plan.run_dir << "/slurm-%j.out\n"
      << "set -euo pipefail\n";
    if (!slurm.setup.empty()) o << "\n# launch.slurm.setup\n" << slurm.setup << (slurm.setup.back() == '\n' ? "" : "\n");

    // The environment contract of ptd-engine (docs/engine.md), one variable a line; a value
    // is a shell word (quoted, or an expansion the batch shell makes).
    std::vector<std::pair<std::string, std::string>> env = {
        {"MASTER_ADDR", !plan.master_addr_given ? std::string("$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)")
                                                : shell_quote(plan.master_addr)},
        {"MASTER_PORT", job.launch.master_port ? std::to_string(job.launch.master_port) : std::string("$((20000 + SLURM_JOB_ID % 20000))")},
        {"WORLD_SIZE", std::to_string(plan.ranks.size())},
        {"LOCAL_WORLD_SIZE", std::to_string(job.cluster.gpus_per_node)},
        {"PTD_RUN_ID", shell_quote(plan.run_id)},
        // The store's secret, made on the first node when the job starts (in no file or command
        // line); srun passes the environment to every task.
        {"PTD_RUN_SECRET", "\"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\""}};
    for (const auto& [k, v] : forwarded_environment(job)) env.emplace_back(k, shell_quote(v));
    o << "\n# The environment contract of ptd-engine (docs/engine.md): rank 0's node hosts the store.\n";
    for (const auto& [k, v] : env) o << "export " << k << "=" << v << "\n";

    // The engine: this machine's (on a file system the nodes share), a copy on each node's
    // local disk (sbcast), or the container image's own.
    const std::string engine = container ? job.launch.engine : plan.upload || plan.local ? plan.local_engine : job.launch.engine;
    std::string rank_engine = engine, rank_job = plan.run_dir + "/job.toml";
    const std::string per_node = "srun --nodes=\"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 --kill-on-bad-exit=1";
    if (slurm.sbcast && !container) {
        rank_engine = "/tmp/ptd-engine.$SLURM_JOB_ID";
        rank_job = "/tmp/ptd-job.$SLURM_JOB_ID.toml";
        o << "\n# launch.slurm.sbcast: the engine and job.toml copied to every node's local disk; the run\n"
          << "# directory is created on each node for the ranks' logs and files.\n"
          << "sbcast --force " << shell_quote(engine) << " \"" << rank_engine << "\"\n"
          << "sbcast --force " << shell_quote(plan.run_dir + "/job.toml") << " \"" << rank_job << "\"\n"
          << per_node << " mkdir -p " << shell_quote(plan.run_dir)
          << (plan.slurm_preflight_ptd.empty() ? "" : " " + shell_quote(plan.run_dir + "/preflight")) << "\n"
          << "trap '" << per_node << " rm -f \"" << rank_engine << "\" \"" << rank_job << "\"' EXIT\n";
    } else {
        // Without sbcast the nodes read this machine's files: refuse, naming the path, on a
        // node where they are not there (a run directory off the shared file system).
        o << "\n# Every node must see the run directory" << (container ? "" : " and the engine")
          << " at these paths (a shared file system);\n# launch.slurm.sbcast = true copies the engine instead.\n"
          << per_node << " bash -c 'for f in \"$@\"; do [[ -r \"$f\" ]] || { echo \"ptd: node $(hostname): $f is not there: "
             "the run directory (launch.run_dir) must be on a file system every node mounts, or set launch.slurm.sbcast = true "
             "to copy the engine\" >&2; exit 1; }; done' check "
          << shell_quote(plan.run_dir + "/job.toml") << (container ? "" : " " + shell_quote(engine)) << "\n";
    }
    // The preflight's judge runs on the batch node, outside any container: it must be there.
    if (!plan.slurm_preflight_ptd.empty())
        o << "[[ -x " << shell_quote(plan.slurm_preflight_ptd) << " ]] || { echo \"ptd: --preflight: "
          << plan.slurm_preflight_ptd << " is not on the batch node $(hostname): it judges the preflight, so it must be on "
             "a file system every node mounts\" >&2; exit 1; }\n";

    // A word of the script: node-local copies name $SLURM_JOB_ID, expanded by the batch shell.
    auto word = [](const std::string& a) { return a.find("$SLURM_JOB_ID") != std::string::npos ? "\"" + a + "\"" : shell_quote(a); };
    std::string args;
    for (const std::string& a : std::vector<std::string>{"--job", rank_job, "--run-dir", plan.run_dir}) args += " " + word(a);
    if (plan.steps > 0) args += " --steps " + std::to_string(plan.steps);
    if (plan.checkpoint_every > 0) args += " --checkpoint-every " + std::to_string(plan.checkpoint_every);
    if (!plan.backend.empty()) args += " --backend " + shell_quote(plan.backend);
    for (const std::string& a : plan.engine_args) args += " " + shell_quote(a);
    std::string srun = "srun --kill-on-bad-exit=1 --distribution=block";
    // Since Slurm 22.05 srun does not take --cpus-per-task from the batch allocation.
    if (slurm.cpus_per_task > 0) srun += " --cpus-per-task=" + std::to_string(slurm.cpus_per_task);
    if (!slurm.gpu_bind.empty()) srun += " --gpu-bind=" + slurm.gpu_bind;
    if (container) {
        std::string mounts = plan.run_dir + ":" + plan.run_dir;
        for (const std::string& m : slurm.container_mounts) mounts += "," + m;
        srun += " --container-image=" + shell_quote(slurm.container_image) + " --container-mounts=" + shell_quote(mounts);
    }
    const std::string srun_unrouted = srun;  // no --output yet: the preflight's go elsewhere
    srun += " --output=" + shell_quote(plan.run_dir + "/rank-%t.log");
    // GPU visibility: with --gpu-bind Slurm gives each task its GPU; else the task sees the
    // node's allocated GPUs (CUDA_VISIBLE_DEVICES="4,5,6,7" on a partial node) and takes
    // the LOCAL_RANK-th of them; without Slurm's GPU list, GPU LOCAL_RANK.
    std::string gpu_pick;
    if (gpus && slurm.gpu_bind.empty())
        gpu_pick = " if [[ \"${CUDA_VISIBLE_DEVICES:-}\" == *,* ]]; then IFS=, read -ra g <<< \"$CUDA_VISIBLE_DEVICES\";"
                   " export CUDA_VISIBLE_DEVICES=${g[$SLURM_LOCALID]}; elif [[ -z \"${CUDA_VISIBLE_DEVICES:-}\" ]]; then"
                   " export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID; fi;";
    // One task per rank: Slurm's task id is the global rank (block distribution puts
    // consecutive ranks on a node, as make_layout's node = rank / gpus_per_node does).
    const std::string srun_head = srun + (plan.max_restarts > 0 ? " --open-mode=append" : "");
    // What each task runs: its rank's environment from Slurm's task ids (and `env`), then the engine.
    auto task = [&](const std::string& env, const std::string& engine_args) {
        return " bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID" + env + ";" + gpu_pick + " exec \"$0\" \"$@\"' " +
               word(rank_engine) + engine_args;
    };
    const std::string rest = task("", args);
    if (!plan.slurm_preflight_ptd.empty()) {
        // Every allocated node probes as `ptd calibrate --check` would (the same ranks and
        // engine, --probe --quick), then `ptd calibrate --collect --check` judges the nodes by
        // the preflight's rule (docs/launcher.md, "Preflight") on the batch node.
        const std::string pf = plan.run_dir + "/preflight";
        std::string probe_args = " --job " + word(rank_job) + " --run-dir " + word(pf) + " --probe --quick --stall-timeout 120";
        if (!plan.backend.empty()) probe_args += " --backend " + shell_quote(plan.backend);
        o << "\n# ptd launch --preflight: a quick probe of every allocated node (GEMMs, collectives; logs in\n"
          << "# preflight/), judged by the preflight's outlier rule before any rank trains.\n"
          << "if ! " << srun_unrouted << " --output=" << shell_quote(pf + "/rank-%t.log")
          << task(" PTD_RUN_ID=\"$PTD_RUN_ID-preflight\"", probe_args) << "; then\n"
          << "    echo \"ptd: --preflight: the probes failed (their logs: " << pf << "); not training\" >&2; exit 1\n"
          << "fi\n"
          << "if ! " << shell_quote(plan.slurm_preflight_ptd) << " calibrate --collect " << shell_quote(pf) << " --check; then\n";
        if (plan.slurm_preflight_force)
            o << "    echo \"ptd: --preflight --force: training despite the preflight\" >&2\n";
        else
            o << "    echo \"ptd: --preflight flagged a node or could not judge them (above); not training (launch.slurm.exclude "
                 "leaves a node out, --force trains anyway)\" >&2; exit 1\n";
        o << "fi\n";
    }
    if (plan.max_restarts <= 0) {
        o << "\n# One task per rank; stdout and stderr of rank r go to rank-r.log, as with ptd launch.\n" << srun_head << rest << "\n";
        return o.str();
    }
    slurm_restart_loop(o, plan, srun_head, rest);
    return o.str();
}

}  // namespace ptd
