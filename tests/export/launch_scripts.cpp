// launch_scripts.cpp — `ptd export --launcher` (issue 28 point 4) and `--format nemo`: every
// format × launcher gives a script bash accepts (bash -n) or a JobSet manifest that parses as
// YAML with its required fields; the arguments in a script are the framework's and pass its
// checks (framework_checks.h); the environment follows Megatron-LM and the cluster; a script
// run with a fake torchrun on PATH writes its config files and hands torchrun the rendezvous
// and entry point, and stops on a placeholder left unset. The nemo module's fields are
// Megatron-Bridge's ConfigContainer fields.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "ptd/export/export.h"

#include "export/framework_checks.h"
#include "job_test_util.h"
#include "process_test_util.h"
#include "text_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

void write_text(const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p) << text;
}

std::string launch_text(const JobSpec& job, ExportFormat f, ScriptLauncher l) {
    auto out = export_launch(job, f, l);
    EXPECT_TRUE(out) << to_string(f) << " " << to_string(l) << ": " << (out ? "" : out.error().str());
    return out ? out->text : std::string();
}

// The manifest as JSON (PyYAML's safe_load: the manifest is plain YAML).
nlohmann::json yaml_json(const TempDir& dir, const std::string& yaml) {
    write_text(dir.path / "manifest.yaml", yaml);
    // Debian's python3, where setup.sh's python3-yaml installs (a pyenv python3 first on PATH
    // need not have PyYAML).
    Proc p = run_captured("/usr/bin/python3 -c 'import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)' " +
                          (dir.path / "manifest.yaml").string());
    EXPECT_EQ(p.rc, 0) << p.err;
    return p.rc == 0 ? nlohmann::json::parse(p.out) : nlohmann::json();
}

int bash_n(const TempDir& dir, const std::string& script) {
    write_text(dir.path / "check.sh", script);
    Proc p = run_captured("bash -n " + (dir.path / "check.sh").string());
    EXPECT_EQ(p.rc, 0) << p.err << "\n" << script;
    return p.rc;
}

// The Megatron-LM arguments after pretrain_gpt.py in a launch script, as `--flag value` pairs.
std::vector<std::pair<std::string, std::string>> script_megatron_args(const std::string& script) {
    const size_t at = script.find("/pretrain_gpt.py\" \\\n");
    EXPECT_NE(at, std::string::npos);
    std::string joined;
    std::istringstream in(script.substr(at + 20));
    std::string line;
    while (std::getline(in, line) && line.starts_with("    ")) {
        line = line.substr(4);
        if (line.ends_with(" \\")) line.resize(line.size() - 2);
        joined += (joined.empty() ? "" : " \\\n") + line;
    }
    return megatron_args(joined + "\n");
}

const JobSpec& moe_job() {
    static const JobSpec j = preset_job("mixtral-8x7b", "tp = 2\npp = 4\ndp = 2\nep = 2\nsequence_parallel = true", 2, 256);
    return j;
}

TEST(LaunchScript, EveryFormatAndLauncherIsValidShellOrYaml) {
    TempDir dir("ptd_launch");
    const std::vector<JobSpec> jobs = {load_asset("llama3-8b-h100.toml"), load_asset("llama3-70b-h100.toml"), moe_job()};
    int written = 0;
    for (const JobSpec& j : jobs)
        for (ExportFormat f : kExportFormats)
            for (ScriptLauncher l : kScriptLaunchers) {
                SCOPED_TRACE(j.model.name + " " + to_string(f) + " " + to_string(l));
                if (!export_job(j, f)) {  // what the format refuses, the script refuses with the same key
                    auto refused = export_launch(j, f, l);
                    ASSERT_FALSE(refused);
                    EXPECT_EQ(refused.error().diagnostics.front().key, export_job(j, f).error().diagnostics.front().key);
                    continue;
                }
                const std::string text = launch_text(j, f, l);
                ++written;
                expect_mentions(text, {"Targets ", "torchrun \\", "--rdzv-backend c10d", "--nproc-per-node " +
                                                                                             std::to_string(j.cluster.gpus_per_node)});
                if (l != ScriptLauncher::k8s) {
                    EXPECT_TRUE(text.starts_with("#!/usr/bin/env bash\n"));
                    bash_n(dir, text);
                    continue;
                }
                // JobSet v1alpha2 (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go).
                const nlohmann::json m = yaml_json(dir, text);
                ASSERT_TRUE(m.is_object());
                EXPECT_EQ(m["apiVersion"], "jobset.x-k8s.io/v1alpha2");
                EXPECT_EQ(m["kind"], "JobSet");
                const std::string name = m["metadata"]["name"];
                EXPECT_LE(name.size(), 63u);
                EXPECT_EQ(m["spec"]["network"]["enableDNSHostnames"], true);
                const nlohmann::json& rj = m["spec"]["replicatedJobs"][0];
                EXPECT_EQ(rj["replicas"], 1);
                const nlohmann::json& job = rj["template"]["spec"];
                EXPECT_EQ(job["parallelism"], j.cluster.nodes);
                EXPECT_EQ(job["completions"], j.cluster.nodes);
                EXPECT_EQ(job["completionMode"], "Indexed");
                const nlohmann::json& pod = job["template"]["spec"];
                EXPECT_EQ(pod["restartPolicy"], "Never");
                const nlohmann::json& c = pod["containers"][0];
                EXPECT_TRUE(c["image"].get<std::string>().starts_with("<IMAGE"));
                EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], j.cluster.gpus_per_node);
                EXPECT_EQ(c["command"], nlohmann::json::array({"bash", "-c"}));
                const std::string script = c["args"][0];
                // The rendezvous host is pod 0's name on the JobSet's headless service.
                EXPECT_TRUE(contains(script, "MASTER_ADDR='" + name + "-" + rj["name"].get<std::string>() + "-0-0." + name + "'"))
                    << script;
                bash_n(dir, script);
            }
    EXPECT_GE(written, 30);
}

TEST(LaunchScript, MegatronArgumentsAreMegatronsAndPassItsChecks) {
    for (const JobSpec& j : {load_asset("llama3-70b-h100.toml"), load_asset("llama3-8b-h100.toml", {"training.data=/data/c4_text"}),
                             moe_job()}) {
        SCOPED_TRACE(j.model.name);
        const std::string text = launch_text(j, ExportFormat::megatron, ScriptLauncher::torchrun);
        const auto args = script_megatron_args(text);
        ASSERT_GT(args.size(), 20u);
        for (const auto& [flag, value] : args)
            EXPECT_TRUE(kMegatronOptions.contains(flag) || kMegatronLaunchOptions.contains(flag)) << flag;
        for (const std::string& v : megatron_violations(args, j.parallel.dp)) ADD_FAILURE() << v;
        for (const std::string& v : transformer_config_violations(args)) ADD_FAILURE() << v;
        // validate_args: --save needs --save-interval > 0.
        EXPECT_GT(std::stoi(value_of(args, "--save-interval")), 0);
        EXPECT_EQ(value_of(args, "--save"), "\"${SAVE_DIR}\"");
        EXPECT_EQ(value_of(args, "--tensorboard-dir"), "\"${LOG_DIR}\"");
        if (j.training.data != "synthetic") {
            EXPECT_EQ(value_of(args, "--data-path"), "\"${DATA}\"");
            EXPECT_EQ(value_of(args, "--tokenizer-model"), "\"${TOKENIZER}\"");
        }
        if (j.model.experts > 1)
            expect_flags(args, {{"--moe-grouped-gemm", ""}, {"--moe-router-load-balancing-type", "aux_loss"},
                                {"--moe-aux-loss-coeff", "1e-2"}, {"--moe-token-dispatcher-type", "alltoall"}});
    }
}

// Megatron-LM d98e8a6 arguments.py validate_args: tp or cp > 1 before Blackwell asserts
// CUDA_DEVICE_MAX_CONNECTIONS=1 (Blackwell and later: no requirement).
TEST(LaunchScript, CudaDeviceMaxConnectionsFollowsMegatron) {
    const std::string one = "export CUDA_DEVICE_MAX_CONNECTIONS=\"1\"";
    for (ExportFormat f : {ExportFormat::megatron, ExportFormat::nemo}) {
        EXPECT_TRUE(contains(launch_text(load_asset("llama3-8b-h100.toml"), f, ScriptLauncher::slurm), one));  // tp 2
        const JobSpec tp1 = load_asset("llama3-8b-h100.toml", {"parallel.tp=1", "parallel.dp=8", "parallel.sequence_parallel=false"});
        EXPECT_FALSE(contains(launch_text(tp1, f, ScriptLauncher::slurm), "CUDA_DEVICE_MAX_CONNECTIONS"));
        const JobSpec cp2 = load_asset("llama3-8b-h100.toml", {"parallel.tp=1", "parallel.cp=2", "parallel.dp=4",
                                                                "parallel.sequence_parallel=false"});
        EXPECT_TRUE(contains(launch_text(cp2, f, ScriptLauncher::slurm), one));
        const JobSpec b200 = load_asset("llama3-8b-h100.toml", {"cluster.gpu=b200"});
        ASSERT_EQ(b200.cluster.gpu.generation, GpuGeneration::blackwell);
        EXPECT_FALSE(contains(launch_text(b200, f, ScriptLauncher::slurm), "export CUDA_DEVICE_MAX_CONNECTIONS"));
    }
    EXPECT_FALSE(contains(launch_text(load_asset("llama3-8b-h100.toml"), ExportFormat::torchtitan, ScriptLauncher::slurm),
                          "CUDA_DEVICE_MAX_CONNECTIONS"));
    // Without --launcher the arguments cannot carry it: a note says so (issue 28).
    EXPECT_TRUE(any_note(*export_job(load_asset("llama3-8b-h100.toml"), ExportFormat::megatron), "CUDA_DEVICE_MAX_CONNECTIONS=1"));
    EXPECT_FALSE(any_note(*export_job(load_asset("llama3-8b-h100.toml", {"parallel.tp=1", "parallel.dp=8",
                                                                         "parallel.sequence_parallel=false"}),
                                      ExportFormat::megatron),
                          "CUDA_DEVICE_MAX_CONNECTIONS"));
}

TEST(LaunchScript, NcclFollowsTheCluster) {
    const JobSpec h100 = load_asset("llama3-70b-h100.toml", {"launch.nccl_ib_hca=[\"mlx5_0\", \"mlx5_3\"]",
                                                             "launch.nccl_socket_ifname=eth0"});
    ASSERT_TRUE(h100.cluster.nvls);
    const std::string s = launch_text(h100, ExportFormat::megatron, ScriptLauncher::slurm);
    expect_mentions(s, {"export NCCL_IB_HCA=\"=mlx5_0,mlx5_3\"", "export NCCL_SOCKET_IFNAME=\"eth0\"", "export NCCL_NVLS_ENABLE=\"1\""});
    const JobSpec a100 = load_asset("gpt3-175b-a100.toml");
    ASSERT_FALSE(a100.cluster.nvls);
    auto out = export_launch(a100, ExportFormat::megatron, ScriptLauncher::slurm);
    ASSERT_TRUE(out) << out.error().str();
    expect_mentions(out->text, {"export NCCL_NVLS_ENABLE=\"0\"", "export NCCL_SOCKET_IFNAME=\"^lo,docker\""});
    EXPECT_TRUE(any_note(*out, "launch.nccl_ib_hca is not set"));
}

// The script itself, run with a stand-in torchrun that records its arguments.
struct FakeTorchrun {
    TempDir dir{"ptd_launch_run"};
    FakeTorchrun() {
        std::filesystem::create_directories(dir.path / "bin");
        write_text(dir.path / "bin/torchrun", "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$PTD_TEST_ARGS\"\n");
        std::filesystem::permissions(dir.path / "bin/torchrun", std::filesystem::perms::owner_all);
    }
    Proc run(const std::string& script, const std::string& env) {
        write_text(dir.path / "launch.sh", script);
        return run_captured("cd " + dir.path.string() + " && env -u SAVE_DIR -u LOG_DIR -u TOKENIZER -u MEGATRON_LM PATH=" +
                            (dir.path / "bin").string() + ":$PATH PTD_TEST_ARGS=" + (dir.path / "args.txt").string() + " " +
                            env + " bash launch.sh");
    }
    std::string args() const { return read_file((dir.path / "args.txt").string()); }
    std::string file(const std::string& name) const { return read_file((dir.path / name).string()); }
};

TEST(LaunchScript, RunsTorchrunWithTheRendezvousAndWritesItsFiles) {
    const JobSpec j = load_asset("llama3-8b-h100.toml");  // one node: the rendezvous is local
    {
        FakeTorchrun t;
        Proc p = t.run(launch_text(j, ExportFormat::torchtitan_toml, ScriptLauncher::torchrun),
                       "SAVE_DIR=/ckpt LOG_DIR=" + (t.dir.path / "logs").string() + " TOKENIZER=/tok");
        ASSERT_EQ(p.rc, 0) << p.err;
        expect_mentions(t.args(), {"--nnodes\n1\n", "--nproc-per-node\n8\n", "--rdzv-backend\nc10d\n",
                                   "--rdzv-endpoint\nlocalhost:29500\n", "-m\ntorchtitan.train\n", "--job.config_file\nptd_job.toml\n",
                                   "--checkpoint.folder\n/ckpt\n", "--model.hf_assets_path\n/tok\n"});
        toml::table doc = toml::parse(t.file("ptd_job.toml"));  // the file it wrote is the export
        EXPECT_EQ(doc["model"]["flavor"].value_or(std::string()), "8B");
        EXPECT_EQ(t.file("ptd_job.toml"), export_text(j, ExportFormat::torchtitan_toml));
        EXPECT_TRUE(std::filesystem::is_directory(t.dir.path / "logs"));
    }
    {
        FakeTorchrun t;
        Proc p = t.run(launch_text(j, ExportFormat::megatron, ScriptLauncher::torchrun),
                       "MEGATRON_LM=/opt/Megatron-LM SAVE_DIR=/ckpt LOG_DIR=" + (t.dir.path / "logs").string());
        ASSERT_EQ(p.rc, 0) << p.err;
        expect_mentions(t.args(), {"/opt/Megatron-LM/pretrain_gpt.py\n", "--save\n/ckpt\n", "--load\n/ckpt\n",
                                   "--tensor-model-parallel-size\n2\n"});
    }
    {  // nemo: the module it writes is valid Python and sets only ConfigContainer fields
        FakeTorchrun t;
        Proc p = t.run(launch_text(j, ExportFormat::nemo, ScriptLauncher::torchrun),
                       "SAVE_DIR=/ckpt LOG_DIR=" + (t.dir.path / "logs").string());
        ASSERT_EQ(p.rc, 0) << p.err;
        expect_mentions(t.args(), {"ptd_job.py\n"});
        const std::string py = t.file("ptd_job.py");
        Proc ast = run_captured("python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' " + (t.dir.path / "ptd_job.py").string());
        EXPECT_EQ(ast.rc, 0) << ast.err;
        expect_mentions(py, {"cfg.checkpoint.save = os.environ[\"SAVE_DIR\"]", "cfg.logger.tensorboard_dir = os.environ[\"LOG_DIR\"]"});
    }
}

TEST(LaunchScript, AnUnsetPlaceholderStopsTheScript) {
    FakeTorchrun t;
    Proc p = t.run(launch_text(load_asset("llama3-8b-h100.toml"), ExportFormat::megatron, ScriptLauncher::torchrun), "");
    EXPECT_EQ(p.rc, 2);
    EXPECT_TRUE(contains(p.err, "ptd: set MEGATRON_LM (it is the placeholder <PATH_TO_Megatron-LM>")) << p.err;
    EXPECT_FALSE(std::filesystem::exists(t.dir.path / "args.txt"));  // torchrun never ran
    // With [paths] in the job, no placeholder is left for them.
    const JobSpec paths = load_asset("llama3-8b-h100.toml", {"paths.save=/ckpt", "paths.logs=/logs", "paths.tokenizer=/tok"});
    const std::string s = launch_text(paths, ExportFormat::torchtitan, ScriptLauncher::slurm);
    EXPECT_FALSE(contains(s, "<PATH_TO_")) << s;
    EXPECT_TRUE(contains(s, "SAVE_DIR='/ckpt'"));
}

TEST(LaunchScript, SlurmStartsOneTorchrunPerNode) {
    const JobSpec j = load_asset("llama3-70b-h100.toml");
    const std::string s = launch_text(j, ExportFormat::megatron, ScriptLauncher::slurm);
    expect_mentions(s, {"#SBATCH --nodes=8\n", "#SBATCH --ntasks-per-node=1\n", "#SBATCH --gpus-per-node=8\n",
                        "MASTER_ADDR=\"$(scontrol show hostnames \"${SLURM_JOB_NODELIST}\" | head -n 1)\"",
                        "RUN_ID=\"${SLURM_JOB_ID}\"", "srun --kill-on-bad-exit=1 --ntasks-per-node=1 --export=ALL \\\n  torchrun \\\n",
                        "Targets Megatron-LM main d98e8a6"});
}

TEST(NemoExport, SetsConfigContainerFieldsFromTheMegatronArguments) {
    for (const JobSpec& j : {load_asset("llama3-70b-h100.toml", {"training.fp8=delayed"}), moe_job(),
                             preset_job("deepseek-v3", "tp = 8\ndp = 128\nep = 64\nsequence_parallel = true", 128)}) {
        SCOPED_TRACE(j.model.name);
        auto out = export_job(j, ExportFormat::nemo);
        ASSERT_TRUE(out) << out.error().str();
        const std::string& py = out->text;
        for (const std::string& field : bridge_assignments(py))
            EXPECT_TRUE(kBridgeFields.contains(field) || field == "mixed_precision" || field == "comm_overlap" || field == "model")
                << field;
        const auto args = megatron_args(export_text(j, ExportFormat::megatron));
        expect_mentions(py, {"cfg.model.tensor_model_parallel_size = " + value_of(args, "--tensor-model-parallel-size") + "\n",
                             "cfg.model.pipeline_model_parallel_size = " + value_of(args, "--pipeline-model-parallel-size") + "\n",
                             "cfg.train.global_batch_size = " + value_of(args, "--global-batch-size") + "\n",
                             "cfg.optimizer.min_lr = " + value_of(args, "--min-lr") + "\n",
                             "pretrain(config=ptd_job_config(), forward_step_func=forward_step)", "Targets Megatron-Bridge"});
        if (j.model.mla()) expect_mentions(py, {"cfg.model = MLAModelProvider()", "cfg.model.q_lora_rank = 1536"});
        if (j.training.fp8 != Fp8Recipe::none)
            expect_mentions(py, {"cfg.mixed_precision.fp8 = \"hybrid\"", "cfg.mixed_precision.fp8_recipe = \"delayed\""});
    }
    // What Megatron-LM refuses, the nemo export refuses at the same key.
    auto z = export_job(load_asset("llama3-8b-h100.toml", {"parallel.zero=3"}), ExportFormat::nemo);
    ASSERT_FALSE(z);
    EXPECT_EQ(z.error().diagnostics.front().key, "parallel.zero");
}

TEST(LaunchScript, LauncherWordsParseAndSuggest) {
    for (ScriptLauncher l : kScriptLaunchers) EXPECT_EQ(*parse_launcher(to_string(l)), l);
    auto bad = parse_launcher("slrum");
    ASSERT_FALSE(bad);
    expect_mentions(bad.error().str(), {"did you mean \"slurm\"", "allowed: torchrun, slurm, k8s"});
    EXPECT_EQ(*parse_export_format("nemo"), ExportFormat::nemo);
}

}  // namespace
