// launch_script.cpp — a job as a runnable launch script (issue 28 point 4): the framework's
// files and entry point with every argument, the per-node torchrun line with c10d rendezvous,
// the environment the framework and the cluster's network need, the [paths] keys, for three
// launchers: a bash script run on every node, a Slurm sbatch script, or a Kubernetes JobSet.
//
// Sources: torchrun's options and c10d rendezvous (torch/distributed/run.py: --nnodes,
// --nproc-per-node, --rdzv-backend c10d, --rdzv-endpoint host:port, --rdzv-id; node ranks are
// assigned by the rendezvous); JobSet v1alpha2 (kubernetes-sigs/jobset 08dfbdf,
// api/jobset/v1alpha2/jobset_types.go: spec.network.enableDNSHostnames gives each pod the
// hostname <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<jobset> on a headless service;
// site/static/examples/pytorch/cnn-mnist/mnist.yaml); NCCL's environment variables
// (NCCL_IB_HCA with "=" for exact names, NCCL_SOCKET_IFNAME, NCCL_NVLS_ENABLE); Megatron-LM
// d98e8a6 megatron/training/arguments.py validate_args: tp or cp > 1 on a GPU before Blackwell
// asserts CUDA_DEVICE_MAX_CONNECTIONS=1, except with FSDP or --overlap-moe-expert-parallel-comm
// (which want more connections; it warns then), and --save needs --save-interval.
#include <algorithm>

#include "export/export_internal.h"

namespace ptd {

const char* to_string(ScriptLauncher l) {
    static const char* const words[] = {"torchrun", "slurm", "k8s"};  // in ScriptLauncher order
    return words[(int)l];
}

Result<ScriptLauncher> parse_launcher(std::string_view word) {
    return export_internal::parse_word(word, kScriptLaunchers, "--launcher");
}

namespace export_internal {

namespace {

constexpr int kMasterPort = 29500;  // torchrun's default --master-port

// A shell word in single quotes ('it'\''s').
std::string sh_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// A setting the script reads: NAME="${NAME:-default}", with why on the line above. A default
// in <...> is a placeholder: the script stops until it is replaced or set in the environment.
struct Setting {
    std::string name, value, why;
    bool placeholder() const { return value.starts_with("<"); }
};

struct EnvVar {
    std::string name, value, why;
};

// What one framework needs from a launch script.
struct FrameworkRun {
    std::string version;                                       // the framework version targeted
    std::vector<Setting> settings;                             // code folders and paths
    std::vector<EnvVar> env;                                   // exported before torchrun
    std::vector<std::pair<std::string, std::string>> files;   // written beside the script: name, text
    std::string entry;                                         // what torchrun runs (script or -m module)
    std::vector<std::string> args;                             // its arguments, one per line
    std::vector<std::string> notes;
};

// The [paths] keys (and training.data) as settings; `need_tokenizer` when the data is real.
void path_settings(const JobSpec& job, FrameworkRun& run, bool need_tokenizer, std::vector<std::string>& notes) {
    const PathsSpec& p = job.paths;
    auto add = [&](const std::string& name, const std::string& value, const std::string& placeholder, const std::string& key,
                   const std::string& why) {
        if (value.empty()) notes.push_back(key + " is not set: the script holds " + placeholder + " in " + name +
                                           " and stops until you set it (in the job, or " + name + "=... in the environment)");
        run.settings.push_back({name, value.empty() ? placeholder : value, why + " (" + key + ")"});
    };
    if (job.training.data != "synthetic")
        run.settings.push_back({"DATA", job.training.data, "the training data (training.data)"});
    if (need_tokenizer) add("TOKENIZER", p.tokenizer, "<PATH_TO_TOKENIZER>", "paths.tokenizer", "the tokenizer");
    add("SAVE_DIR", p.save, "<PATH_TO_CHECKPOINTS>", "paths.save", "checkpoints are written here");
    run.settings.push_back({"LOAD_DIR", p.load.empty() ? "${SAVE_DIR}" : p.load,
                            "checkpoints are resumed from here (paths.load; the save folder when absent)"});
    add("LOG_DIR", p.logs, "<PATH_TO_LOGS>", "paths.logs", "TensorBoard logs and outputs");
}

int save_interval(const JobSpec& job) { return job.paths.save_interval > 0 ? job.paths.save_interval : job.training.steps; }

// The NCCL variables that follow the cluster: its compute HCAs, NCCL's socket interface and
// NVLink SHARP, from the cluster preset and the [launch] keys.
void nccl_env(const JobSpec& job, FrameworkRun& run, std::vector<std::string>& notes) {
    const ClusterSpec& c = job.cluster;
    const LaunchSpec& l = job.launch;
    if (!l.nccl_ib_hca.empty()) {
        std::string hcas = "=";  // "=": exact names (without it mlx5_1 also matches mlx5_10)
        for (size_t i = 0; i < l.nccl_ib_hca.size(); ++i) hcas += (i ? "," : "") + l.nccl_ib_hca[i];
        run.env.push_back({"NCCL_IB_HCA", hcas, "the compute InfiniBand HCAs (launch.nccl_ib_hca), storage NICs left out"});
    } else if (c.nodes > 1) {
        notes.push_back("launch.nccl_ib_hca is not set: NCCL uses every active HCA, storage NICs included; the cluster has " +
                        std::to_string(c.nics_per_node > 0 ? c.nics_per_node : c.gpus_per_node) +
                        " compute NICs per node (list them, e.g. from `ibdev2netdev`)");
    }
    if (!l.nccl_socket_ifname.empty())
        run.env.push_back({"NCCL_SOCKET_IFNAME", l.nccl_socket_ifname, "NCCL's bootstrap / socket interface (launch.nccl_socket_ifname)"});
    else
        run.env.push_back({"NCCL_SOCKET_IFNAME", "^lo,docker", "NCCL's bootstrap socket: any interface but loopback and docker "
                                                               "(set launch.nccl_socket_ifname to name one)"});
    run.env.push_back({"NCCL_NVLS_ENABLE", c.nvls ? "1" : "0",
                       c.nvls ? "NVLink SHARP all-reduce in the NVSwitch (the cluster's nvls; the estimate assumes it)"
                              : "no NVLink SHARP on this cluster (its nvls = false), as the estimate assumes"});
    if (c.job_nvlink_domain() > c.gpus_per_node)
        run.env.push_back({"NCCL_MNNVL_ENABLE", "1", "multi-node NVLink domain (" + describe_nvlink_domain(job) +
                                                          "): NCCL >= 2.25 with an IMEX channel"});
}

// Megatron-Core's environment: CUDA_DEVICE_MAX_CONNECTIONS (megatron.cpp, validate_args).
void megatron_core_env(const JobSpec& job, FrameworkRun& run) {
    const DeviceConnections c = megatron_device_connections(job);
    if (!c.value.empty()) run.env.push_back({"CUDA_DEVICE_MAX_CONNECTIONS", c.value, c.why});
    else if (!c.why.empty()) run.notes.push_back("CUDA_DEVICE_MAX_CONNECTIONS is not set: " + c.why);
}

// What a launch script adds to Megatron-LM's arguments: paths, logging, and the MoE runtime
// flags (grouped GEMM, the router's load balancing) that the estimate does not model but a run
// must choose. Values "${NAME}" are the script's settings.
std::vector<std::pair<std::string, std::string>> megatron_launch_args(const JobSpec& job, std::vector<std::string>& notes) {
    std::vector<std::pair<std::string, std::string>> a;
    if (job.training.data != "synthetic") {
        a.push_back({"--tokenizer-type", "HuggingFaceTokenizer"});
        a.push_back({"--tokenizer-model", "\"${TOKENIZER}\""});
    }
    a.push_back({"--save", "\"${SAVE_DIR}\""});
    a.push_back({"--save-interval", std::to_string(save_interval(job))});  // validate_args: --save needs it
    a.push_back({"--load", "\"${LOAD_DIR}\""});
    a.push_back({"--tensorboard-dir", "\"${LOG_DIR}\""});
    const ModelSpec& m = job.model;
    if (m.experts > 1) {
        a.push_back({"--moe-grouped-gemm", ""});  // Transformer Engine's grouped GEMM over the local experts
        if (m.moe_router_num_groups > 0) {
            // Group-limited routing is DeepSeek-V3's: sigmoid scores, expert-bias balancing and a
            // sequence-wise aux loss of 1e-4 (DeepSeek-V3 report §2.1.2; Megatron-Bridge
            // models/deepseek/deepseek_v3_bridge.py sets the same).
            a.push_back({"--moe-router-score-function", "sigmoid"});
            a.push_back({"--moe-router-enable-expert-bias", ""});
            a.push_back({"--moe-router-load-balancing-type", "seq_aux_loss"});
            a.push_back({"--moe-aux-loss-coeff", "1e-4"});
        } else {
            // Megatron's default balancing (aux_loss) with Switch Transformer's α = 0.01
            // (Fedus et al. 2021 §2.2); Megatron's own default coefficient is 0 (no balancing).
            a.push_back({"--moe-router-load-balancing-type", "aux_loss"});
            a.push_back({"--moe-aux-loss-coeff", "1e-2"});
            notes.push_back("MoE router: --moe-aux-loss-coeff 1e-2 (Switch Transformer's α); set the model's own "
                            "coefficient if it has one");
        }
    }
    return a;
}

std::string arg_line(const std::pair<std::string, std::string>& a) { return a.second.empty() ? a.first : a.first + " " + a.second; }

Result<FrameworkRun> framework_run(const JobSpec& job, ExportFormat format) {
    FrameworkRun run;
    auto exported = export_job(job, format);
    if (!exported) return std::unexpected(exported.error());
    for (const std::string& n : exported->notes)  // the script sets CUDA_DEVICE_MAX_CONNECTIONS itself
        if (!n.starts_with("run with CUDA_DEVICE_MAX_CONNECTIONS")) run.notes.push_back(n);
    const bool real_data = job.training.data != "synthetic";
    switch (format) {
        case ExportFormat::megatron: {
            run.version = "Megatron-LM main d98e8a6 (2026-08)";
            run.settings.push_back({"MEGATRON_LM", "<PATH_TO_Megatron-LM>", "a Megatron-LM checkout at d98e8a6 (pretrain_gpt.py)"});
            path_settings(job, run, real_data, run.notes);
            megatron_core_env(job, run);
            run.entry = "\"${MEGATRON_LM}/pretrain_gpt.py\"";
            for (const auto& a : split_megatron_args(exported->text))
                run.args.push_back(a.first == "--data-path" ? "--data-path \"${DATA}\"" : arg_line(a));
            for (const auto& a : megatron_launch_args(job, run.notes)) run.args.push_back(arg_line(a));
            break;
        }
        case ExportFormat::nemo: {
            run.version = "Megatron-Bridge main 067f987 (2026-08) on Megatron-Core d98e8a6";
            path_settings(job, run, real_data, run.notes);
            megatron_core_env(job, run);
            auto extra = megatron_launch_args(job, run.notes);
            auto module = nemo_module(job, extra);
            if (!module) return std::unexpected(module.error());
            std::string text = module->text;
            if (real_data) {  // the data path, from the script's setting
                const std::string literal = "cfg.dataset.data_path = \"";
                if (size_t at = text.find(literal); at != std::string::npos) {
                    const size_t end = text.find('\n', at);
                    text.replace(at, end - at, "cfg.dataset.data_path = os.environ[\"DATA\"]");
                }
            }
            run.files.push_back({"ptd_job.py", text});
            run.entry = "ptd_job.py";
            break;
        }
        case ExportFormat::torchtitan: {
            run.version = "torchtitan main b5bcd76 (2026-08, the Python config system)";
            path_settings(job, run, true, run.notes);
            // The module reads the paths from the environment the script exports.
            std::string text = exported->text;
            std::string paths = "    # Paths from the launch script's environment (job keys [paths]).\n"
                                "    config.hf_assets_path = os.environ[\"TOKENIZER\"]  # tokenizer files\n"
                                "    config.dump_folder = os.environ[\"LOG_DIR\"]\n"
                                "    config.metrics.enable_tensorboard = True\n"
                                "    config.checkpoint.enable = True\n"
                                "    config.checkpoint.folder = os.environ[\"SAVE_DIR\"]\n"
                                "    config.checkpoint.interval = " + std::to_string(save_interval(job)) + "\n"
                                "    if os.environ[\"LOAD_DIR\"] != os.environ[\"SAVE_DIR\"]:\n"
                                "        config.checkpoint.initial_load_path = os.environ[\"LOAD_DIR\"]\n"
                                "        config.checkpoint.initial_load_model_only = False\n";
            const std::string ret = "    return config\n";
            const size_t at = text.rfind(ret);
            if (at != std::string::npos) text.insert(at, paths);
            const size_t first_import = text.find("\nfrom ");
            if (first_import != std::string::npos) text.insert(first_import + 1, "import os\n\n");
            if (real_data)
                run.notes.push_back("training.data: torchtitan reads Hugging Face datasets; point the baseline's "
                                    "config.dataloader dataset at " + job.training.data + " in ptd_job.py");
            run.files.push_back({"ptd_job.py", text});
            run.env.push_back({"PYTHONPATH", "${PWD}${PYTHONPATH:+:${PYTHONPATH}}", "so -m torchtitan.train finds ptd_job.py"});
            run.entry = "-m torchtitan.train";
            run.args = {"--module ptd_job", "--config ptd_job"};
            break;
        }
        case ExportFormat::torchtitan_toml: {
            run.version = "torchtitan v0.2.2 (73a0e69, the TOML train config)";
            path_settings(job, run, true, run.notes);
            run.files.push_back({"ptd_job.toml", exported->text});
            run.entry = "-m torchtitan.train";
            // job_config.py of v0.2.2: [job] dump_folder, [model] hf_assets_path, [metrics]
            // enable_tensorboard, [checkpoint] enable / folder / interval / initial_load_path.
            run.args = {"--job.config_file ptd_job.toml", "--job.dump_folder \"${LOG_DIR}\"",
                        "--model.hf_assets_path \"${TOKENIZER}\"", "--metrics.enable_tensorboard",
                        "--checkpoint.enable", "--checkpoint.folder \"${SAVE_DIR}\"",
                        "--checkpoint.interval " + std::to_string(save_interval(job))};
            if (real_data) run.args.push_back("--training.dataset_path \"${DATA}\"");
            break;
        }
        case ExportFormat::deepspeed: {
            run.version = "DeepSpeed master edaa722 (2026-08)";
            run.settings.push_back({"TRAIN_SCRIPT", "<PATH_TO_TRAINING_SCRIPT>",
                                    "your training script: it builds the model and calls deepspeed.initialize(args=...) "
                                    "with deepspeed.add_config_arguments (DeepSpeed has no entry point of its own)"});
            path_settings(job, run, real_data, run.notes);
            run.files.push_back({"ds_config.json", exported->text});
            run.entry = "\"${TRAIN_SCRIPT}\"";
            run.args = {"--deepspeed", "--deepspeed_config ds_config.json"};
            run.notes.push_back("--format deepspeed: the training script reads the paths from the environment the "
                                "launch script exports (DATA, TOKENIZER, SAVE_DIR, LOAD_DIR, LOG_DIR) and builds the model "
                                "([model], tp " + std::to_string(job.parallel.tp) + ", pp " + std::to_string(job.parallel.pp) + ")");
            break;
        }
    }
    nccl_env(job, run, run.notes);
    return run;
}

// How the node script finds the rendezvous.
struct Rendezvous {
    std::string master_addr;  // shell text for MASTER_ADDR's default
    std::string run_id;       // shell text for the rendezvous id
    std::string why;          // comment
};

// The body every node runs: settings, their check, the environment, the files, torchrun.
std::vector<std::string> node_script(const JobSpec& job, const FrameworkRun& run, const Rendezvous& rdzv, bool exec) {
    std::vector<std::string> s;
    s.push_back("set -euo pipefail");
    s.push_back("");
    s.push_back("# ---- settings: replace each <...>, or set the variable in the environment ----");
    // A value from the environment wins; else the job's, single-quoted (a path may hold any
    // character), or another setting ("${SAVE_DIR}") expanded.
    auto assign = [&](const std::string& name, const std::string& value) {
        s.push_back("[[ -n \"${" + name + ":-}\" ]] || " + name + "=" +
                    (value.starts_with("${") || value.starts_with("$(") ? "\"" + value + "\"" : sh_quote(value)));
    };
    std::string names;
    for (const Setting& v : run.settings) {
        s.push_back("# " + v.why);
        assign(v.name, v.value);
        names += v.name + " ";
    }
    s.push_back("# " + rdzv.why);
    assign("MASTER_ADDR", rdzv.master_addr);
    assign("MASTER_PORT", std::to_string(kMasterPort));
    assign("RUN_ID", rdzv.run_id);
    s.push_back("for name in " + names + "MASTER_ADDR; do");
    s.push_back("  case \"${!name}\" in");
    s.push_back("    \"<\"*\">\") echo \"ptd: set ${name} (it is the placeholder ${!name}; see the comment above it)\" >&2; exit 2 ;;");
    s.push_back("  esac");
    s.push_back("done");
    s.push_back("export " + names + "MASTER_ADDR MASTER_PORT  # the training code reads the paths from here");
    s.push_back("mkdir -p \"${LOG_DIR}\"");
    s.push_back("");
    s.push_back("# ---- environment ----");
    for (const EnvVar& e : run.env) {
        s.push_back("# " + e.why);
        s.push_back("export " + e.name + "=\"" + e.value + "\"");
    }
    for (const auto& [name, text] : run.files) {
        s.push_back("");
        s.push_back("# ---- " + name + " (written by ptd export) ----");
        s.push_back("cat > " + name + " <<'PTD_EOF'");
        size_t start = 0;
        while (start < text.size()) {
            size_t end = text.find('\n', start);
            s.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
            if (end == std::string::npos) break;
            start = end + 1;
        }
        s.push_back("PTD_EOF");
    }
    s.push_back("");
    s.push_back("# ---- one torchrun per node: " + std::to_string(job.cluster.gpus_per_node) + " ranks here, " +
                std::to_string(job.world_size()) + " in all; the c10d rendezvous assigns node ranks ----");
    s.push_back(std::string(exec ? "exec " : "") + "torchrun \\");
    s.push_back("  --nnodes " + std::to_string(job.cluster.nodes) + " \\");
    s.push_back("  --nproc-per-node " + std::to_string(job.cluster.gpus_per_node) + " \\");
    s.push_back("  --rdzv-backend c10d \\");
    s.push_back("  --rdzv-endpoint \"${MASTER_ADDR}:${MASTER_PORT}\" \\");
    s.push_back("  --rdzv-id \"${RUN_ID}\" \\");
    s.push_back("  " + run.entry + (run.args.empty() ? "" : " \\"));
    for (size_t i = 0; i < run.args.size(); ++i) s.push_back("    " + run.args[i] + (i + 1 < run.args.size() ? " \\" : ""));
    return s;
}

std::vector<std::string> header_comments(const JobSpec& job, ExportFormat format, ScriptLauncher launcher, const FrameworkRun& run) {
    const ParallelSpec& p = job.parallel;
    std::vector<std::string> h;
    h.push_back("Launch script written by `ptd export --format " + std::string(to_string(format)) + " --launcher " +
                to_string(launcher) + "` from " + job.origin.file);
    h.push_back("Targets " + run.version + ".");
    h.push_back(job.model.name + " on " + std::to_string(job.cluster.nodes) + (job.cluster.nodes == 1 ? " node × " : " nodes × ") +
                std::to_string(job.cluster.gpus_per_node) + " GPUs: tp " + std::to_string(p.tp) + " · pp " +
                std::to_string(p.pp) + (p.vpp > 1 ? " (vpp " + std::to_string(p.vpp) + ")" : "") + " · cp " +
                std::to_string(p.cp) + " · dp " + std::to_string(p.dp) + (p.ep > 1 ? " · ep " + std::to_string(p.ep) : "") +
                ", micro-batch " + std::to_string(job.training.micro_batch) + ", global batch " +
                std::to_string(job.training.global_batch) + ".");
    for (const std::string& n : run.notes) h.push_back("Note: " + n);
    return h;
}

std::string join_lines(const std::vector<std::string>& lines, const std::string& indent = "") {
    std::string out;
    for (const std::string& l : lines) out += (l.empty() ? std::string() : indent + l) + "\n";
    return out;
}

// A Kubernetes object name from the model's name: lowercase letters, digits and '-'.
std::string k8s_name(const JobSpec& job) {
    std::string out = "ptd-";
    for (char c : job.model.name) {
        const char l = (char)std::tolower((unsigned char)c);
        out += std::isalnum((unsigned char)l) ? l : '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.substr(0, 40);
}

}  // namespace

}  // namespace export_internal

Result<ExportOutput> export_launch(const JobSpec& job, ExportFormat format, ScriptLauncher launcher) {
    using namespace export_internal;
    auto run = framework_run(job, format);
    if (!run) return std::unexpected(run.error());
    ExportOutput out;
    out.notes = run->notes;
    const std::vector<std::string> header = header_comments(job, format, launcher, *run);
    std::string text;
    switch (launcher) {
        case ScriptLauncher::torchrun: {
            const std::string first = job.cluster.nodes == 1      ? "localhost"
                                      : job.cluster.hosts.empty() ? "<ADDRESS_OF_THE_FIRST_NODE>"
                                                                  : job.cluster.hosts.front();
            text += "#!/usr/bin/env bash\n";
            text += join_lines(header, "# ");
            text += job.cluster.nodes == 1 ? std::string("# Run it on the node: bash ptd_launch.sh\n")
                                           : "# Run this script on each of the " + std::to_string(job.cluster.nodes) +
                                                 " nodes (the same command everywhere), e.g. MASTER_ADDR=<first node> bash "
                                                 "ptd_launch.sh\n";
            text += join_lines(node_script(job, *run,
                                           {first, "ptd-" + std::to_string(job.world_size()),
                                            "the rendezvous host: the first node (cluster.hosts[0] when the job lists hosts)"},
                                           true));
            break;
        }
        case ScriptLauncher::slurm: {
            text += "#!/usr/bin/env bash\n";
            text += "#SBATCH --job-name=" + k8s_name(job) + "\n";
            text += "#SBATCH --nodes=" + std::to_string(job.cluster.nodes) + "\n";
            text += "#SBATCH --ntasks-per-node=1\n";
            text += "#SBATCH --gpus-per-node=" + std::to_string(job.cluster.gpus_per_node) + "\n";
            text += "#SBATCH --exclusive\n";
            text += join_lines(header, "# ");
            text += "# Submit with sbatch from a folder every node sees (the files below are written there).\n";
            std::vector<std::string> body = node_script(
                job, *run,
                {"$(scontrol show hostnames \"${SLURM_JOB_NODELIST}\" | head -n 1)", "${SLURM_JOB_ID}",
                 "the rendezvous host: the allocation's first node"},
                false);
            // One task per node runs torchrun (srun); the batch shell has set everything above.
            const auto torchrun = std::find_if(body.begin(), body.end(), [](const std::string& l) { return l.starts_with("torchrun"); });
            body.insert(torchrun, "srun --kill-on-bad-exit=1 --ntasks-per-node=1 --export=ALL \\");
            if (auto t = std::find_if(body.begin(), body.end(), [](const std::string& l) { return l.starts_with("torchrun"); });
                t != body.end())
                *t = "  " + *t;
            text += join_lines(body);
            break;
        }
        case ScriptLauncher::k8s: {
            const std::string name = k8s_name(job);
            const std::string workers = "workers";
            std::vector<std::string> script = node_script(
                job, *run, {name + "-" + workers + "-0-0." + name, name, "the rendezvous host: pod 0 on JobSet's headless service"},
                true);
            script.insert(script.begin(), "cd \"${WORKDIR:-/tmp}\"");
            text += join_lines(header, "# ");
            text += "# A JobSet (jobset.x-k8s.io/v1alpha2; needs the JobSet controller): one pod per node, each running\n"
                    "# torchrun with c10d rendezvous at pod 0's DNS name on the headless service JobSet creates.\n"
                    "# Replace the <IMAGE> and mount the data / checkpoint volumes before `kubectl apply -f`.\n";
            // JobSet v1alpha2: one replicated Job of `nodes` indexed pods, one GPU node each.
            std::string manifest = R"(apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: NAME
spec:
  network:
    enableDNSHostnames: true
  replicatedJobs:
  - name: WORKERS
    replicas: 1
    template:
      spec:
        parallelism: NODES
        completions: NODES
        completionMode: Indexed
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: trainer
              image: "<IMAGE: a container with VERSION>"
              command: ["bash", "-c"]
              args:
              - |
SCRIPT              ports:
              - containerPort: PORT
              resources:
                limits:
                  nvidia.com/gpu: GPUS
              volumeMounts:
              - name: dshm
                mountPath: /dev/shm
            volumes:
            - name: dshm  # NCCL and the data loaders need a large /dev/shm
              emptyDir:
                medium: Memory
)";
            auto fill = [&](const std::string& token, const std::string& value) {
                for (size_t at = manifest.find(token); at != std::string::npos; at = manifest.find(token, at + value.size()))
                    manifest.replace(at, token.size(), value);
            };
            fill("NAME", name);
            fill("WORKERS", workers);
            fill("NODES", std::to_string(job.cluster.nodes));
            fill("VERSION", run->version);
            fill("PORT", std::to_string(kMasterPort));
            fill("GPUS", std::to_string(job.cluster.gpus_per_node));
            fill("SCRIPT", join_lines(script, "                "));  // last: the script may hold the other tokens
            text += manifest;
            break;
        }
    }
    out.text = text;
    return out;
}

}  // namespace ptd
