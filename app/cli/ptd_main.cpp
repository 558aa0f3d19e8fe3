// ptd_main.cpp — the `ptd` command line: validate, layout, presets, estimate, plan and
// export (docs/cli.md). Exit codes: 0 ok, 2 usage/config error, 1 runtime failure.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_parse.h"
#include "cmd_calibrate.h"
#include "cmd_launch.h"
#include "cmd_schedule.h"
#include "ptd/common/cli_number.h"
#include "commands.h"

namespace {

// --partition, --account, --qos and --time, each needing `slurm` (the --slurm flag): the job's
// launch.slurm.* keys, for `ptd launch` and `ptd calibrate` alike.
void add_slurm_job_options(CLI::App* cmd, CLI::Option* slurm, ptd::LaunchArgs& a) {
    for (auto [flag, into, what] : {std::tuple{"--partition", &a.partition, "partition"}, std::tuple{"--account", &a.account, "account"},
                                    std::tuple{"--qos", &a.qos, "QOS"}, std::tuple{"--time", &a.time, "time limit (e.g. 04:00:00)"}})
        cmd->add_option(flag, *into, std::string("With --slurm: the job's Slurm ") + what + " (launch.slurm." + (flag + 2) + ")")
            ->needs(slurm);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"ptd — plan, check and run hybrid-parallel (TP × PP × DP) training jobs.\n"
                 "JOB is a TOML job spec (docs/job-spec.md), or @default / @tiny for the built-in jobs."};
    app.set_version_flag("--version", std::string("ptd ") + PTD_VERSION);
    app.require_subcommand(1);
    app.fallthrough();

    ptd::ValidateArgs va;
    auto* validate = app.add_subcommand("validate", "Check job specs; print a summary, --json, or --print the canonical TOML");
    validate->add_option("JOB", va.jobs, "Job spec file(s)")->required();
    validate->add_flag("--json", va.json, "Machine-readable result (schema ptd.validate/1)");
    validate->add_flag("--print", va.print, "Print each valid job as canonical TOML (what saving writes)");
    // One KEY=VALUE per --set (allow_extra_args(false)), so `--set k=v JOB` leaves JOB alone.
    const char* set_help = "Override a job key, e.g. --set parallel.tp=4 (repeatable; checked like the file)";
    validate->add_option("--set", va.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);

    ptd::LayoutArgs la;
    std::string color_by = "tp";
    auto* layout = app.add_subcommand("layout", "Draw the rank layout on the node grid");
    layout->add_option("JOB", la.job, "Job spec file")->required();
    layout->add_option("--color-by", color_by, "Colour cells by TP group, PP stage, DP replica or CP rank")
        ->check(CLI::IsMember({"tp", "pp", "dp", "cp"}));
    layout->add_option("--hosts", la.hosts, "DeepSpeed-style hostfile (overrides the job's hosts)");
    layout->add_flag("--json", la.json, "Every rank and group as JSON (schema ptd.layout/1)");
    layout->add_flag("--all", la.all, "Draw every node (default: elide the middle beyond 16 nodes)");
    layout->add_option("--set", la.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);

    ptd::EstimateArgs ea;
    auto* estimate = app.add_subcommand("estimate", "Memory per stage, step time, tokens/s and MFU of a job");
    estimate->add_option("JOB", ea.job, "Job spec file, @default or @tiny")->required();
    estimate->add_option("--profile", ea.profile, "Cluster profile from ptd calibrate (default: the job's cluster.profile)");
    estimate->add_option("--set", ea.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);
    estimate->add_flag("--json", ea.json, "Machine-readable estimate (schema ptd.estimate/1)");
    std::string compare_positional;
    auto* second = estimate->add_option("JOB2", compare_positional,
                                        "A second job: both side by side, the rows that differ marked (schema "
                                        "ptd.estimate-compare/1 with --json)");
    estimate->add_option("--compare", ea.compare, "The same as a second JOB")->excludes(second);

    ptd::ScheduleArgs sa;
    auto* schedule = app.add_subcommand("schedule", "Draw the predicted pipeline timeline of a job (and a run's measured one under it)");
    schedule->add_option("JOB", sa.job, "Job spec file, @default or @tiny")->required();
    schedule->add_option("--set", sa.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);
    schedule->add_option("--profile", sa.profile, "Cluster profile from ptd calibrate (default: the job's cluster.profile)");
    schedule->add_option("--steps-of", sa.steps_of, "Run directory whose measured timeline (timeline/rank-*.tsv) is drawn under the prediction")->type_name("RUN_DIR");
    schedule->add_option("--trace", sa.trace, "Also write the predicted timeline as Chrome trace JSON (Perfetto, chrome://tracing)")->type_name("FILE");
    schedule->add_flag("--json", sa.json, "Machine-readable timeline (schema ptd.schedule/1)");

    ptd::TraceArgs ta;
    auto* trace = app.add_subcommand("trace", "Write a run's measured timeline as Chrome trace JSON (Perfetto, chrome://tracing)");
    trace->add_option("RUN_DIR", ta.run_dir, "Run directory with timeline/rank-*.tsv files")->required();
    trace->add_option("-o,--output", ta.out, "Trace file to write")->required()->type_name("FILE");

    ptd::PlanArgs pl;
    auto* plan = app.add_subcommand("plan", "Search every layout of the job's model and rank those that fit");
    plan->add_option("JOB", pl.job, "Job spec file, @default or @tiny")->required();
    plan->add_option("--profile", pl.profile, "Cluster profile from ptd calibrate (default: the job's cluster.profile)");
    plan->add_option("--top", pl.top, "How many layouts to list (default 10)")->check(CLI::Range(1, 10000));
    plan->add_option("--gpus", pl.gpus, "Plan for this many GPUs (default: the job's cluster)")->check(CLI::Range(1, 1 << 24));
    plan->add_option("--headroom", pl.headroom,
                     "Fraction of GPU memory to leave free, 0..0.9 (default: estimate.headroom, else the framework's default)")
        ->check(ptd::cli::FiniteRange(0.0, 0.9));
    plan->add_flag("--tp-beyond-node", pl.tp_beyond_node, "Also try tp larger than a node");
    plan->add_flag("--any-framework", pl.any_framework,
                   "Search the layouts of every framework, not only training.framework's, and mark each row with those that run it");
    // zb: schedules stock Megatron-LM / DeepSpeed / torchtitan cannot run.
    plan->add_flag("--zb-h1", pl.try_zb_h1, "Also try the ZB-H1 zero-bubble schedule (sail-sg's zero-bubble Megatron-LM fork runs it)");
    plan->add_flag("--dualpipe", pl.try_dualpipe, "Also try DualPipe (deepseek-ai/DualPipe runs it)");
    plan->add_option("--objective", pl.objective,
                     "Order the listed layouts by throughput (default), time, cost or energy to train training.tokens")
        ->check(CLI::IsMember({"throughput", "time", "cost", "energy"}));
    plan->add_flag("--exhaustive", pl.exhaustive, "Evaluate every layout (no pruning; slower, same answer)");
    plan->add_flag("--unfold", pl.unfold,
                   "List a layout once per interleaving depth and TP-overlap setting (default: one row per layout, the others named under the table)");
    plan->add_option("--threads", pl.threads, "Threads that score layouts (default: one per hardware thread; the plan is the same on any number)")
        ->check(CLI::Range(1, 4096));
    plan->add_option("--set", pl.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);
    plan->add_flag("--json", pl.json, "Machine-readable plan (schema ptd.plan/1)");

    ptd::ExportArgs xa;
    std::string format, launcher;
    auto* export_cmd = app.add_subcommand("export", "Write the job as Megatron-LM arguments, a Megatron-Bridge (NeMo) script, a DeepSpeed config, a torchtitan Python config or a torchtitan v0.2 TOML; with --launcher, as a launch script; or ptd-engine's ranks as a Kubernetes JobSet or Kubeflow TrainJob (--format jobset | trainjob)");
    export_cmd->add_option("JOB", xa.job, "Job spec file, @default or @tiny")->required();
    export_cmd->add_option("--format", format, "Target framework")
        ->required()
        ->check(CLI::IsMember({"megatron", "deepspeed", "torchtitan", "torchtitan-toml", "nemo", "jobset", "trainjob"}));
    export_cmd->add_option("--launcher", launcher,
                           "Write a runnable launch script: torchrun (bash, run on every node), slurm (sbatch) or k8s (JobSet)")
        ->check(CLI::IsMember({"torchrun", "slurm", "k8s"}));
    // jobset / trainjob: ptd-engine's ranks as `ptd launch --k8s` writes them (not a framework's).
    export_cmd->add_option("--image", xa.image,
                           "With --format jobset or trainjob: the container image holding ptd-engine (default launch.k8s.image)");
    export_cmd->add_option("--run-root", xa.run_root, "With --format jobset or trainjob: folder of the run directory (default launch.run_dir)");
    export_cmd->add_option("--run-id", xa.run_id, "With --format jobset or trainjob: run id (default YYYYMMDD-HHMMSS-PID)");
    export_cmd->add_flag("--plan", xa.plan, "Export the planner's best layout instead of the job's");
    export_cmd->add_option("--set", xa.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);

    ptd::PresetsArgs pa;
    auto* presets_cmd = app.add_subcommand("presets", "List model and GPU presets");
    presets_cmd->add_flag("--json", pa.json, "Machine-readable list (schema ptd.presets/1)");

    ptd::WatchArgs wa;
    bool no_sparklines = false;
    auto* watch = app.add_subcommand("watch", "Show a run directory's dashboard: per-rank state, step, loss, speed, memory");
    watch->add_option("RUN_DIR", wa.run_dir, "Run directory (runs/<run-id>) written by ptd launch")->required();
    watch->add_flag("--once", wa.once, "Print the dashboard of what is there now and exit");
    watch->add_option("--interval", wa.interval, "Seconds between redraws on a terminal (default 1)")->check(ptd::cli::FiniteRange(0.05, 3600.0));
    watch->add_flag("--no-sparklines", no_sparklines, "Leave out the loss sparkline column");
    watch->add_option("--profile", wa.profile,
                      "Cluster profile for the speed prediction (default: the one the run recorded, else the job's)");
    watch->add_option("--stale-after", wa.stale_after,
                      "Seconds without output from any unfinished rank after which a run whose manifest never "
                      "ends (Slurm, a killed launcher) counts as over (default 120)");

    ptd::LaunchArgs lca;
    auto* launch = app.add_subcommand("launch", "Start the job's ranks locally or over SSH with a live status per rank");
    launch->add_option("JOB", lca.job, "Job spec file, @default or @tiny")->required();
    launch->add_option("--hosts", lca.hosts, "DeepSpeed-style hostfile: run over SSH on these hosts");
    launch->add_flag("--dry-run", lca.dry_run, "Print each host's exact commands and environment; connect nowhere");
    launch->add_flag("--upload", lca.upload, "Copy the local ptd-engine to each host over SFTP (SHA-256 checked)");
    launch->add_flag("--accept-new-host-keys", lca.accept_new_host_keys, "Record unknown SSH host keys (a changed key is always refused)");
    launch->add_flag("--slurm", lca.slurm, "Write RUN_DIR/sbatch.sh (srun, same ranks and environment) instead of launching");
    auto* submit = launch->add_flag("--submit", lca.submit, "With --slurm: submit the script (sbatch) and record the job id for ptd watch and ptd stop");
    submit->needs(launch->get_option("--slurm"));
    auto* k8s = launch->add_flag("--k8s", lca.k8s, "Write RUN_DIR/jobset.yaml (a Kubernetes JobSet, one pod per node) instead of launching");
    k8s->excludes(launch->get_option("--slurm"));
    launch->add_option("--image", lca.image, "With --k8s: the container image holding ptd-engine (default launch.k8s.image)")->needs(k8s);
    launch->add_flag("--apply", lca.apply, "With --k8s: kubectl apply the JobSet (needs a kubeconfig)")->needs(k8s);
    add_slurm_job_options(launch, launch->get_option("--slurm"), lca);
    launch->add_option("--steps", lca.steps, "Stop after this step (ptd-engine --steps)")->check(CLI::Range(1, 1 << 30));
    launch->add_option("--run-root", lca.run_root, "Folder for run directories (default launch.run_dir)");
    launch->add_option("--run-id", lca.run_id, "Run id (default YYYYMMDD-HHMMSS-PID)");
    launch->add_option("--engine", lca.engine, "Local ptd-engine to run or upload (default: next to ptd, else PATH)");
    launch->add_option("--known-hosts", lca.known_hosts, "known_hosts file (default ~/.ssh/known_hosts)");
    launch->add_option("--ssh-config", lca.ssh_config, "ssh config file (default ~/.ssh/config)");
    launch->add_option("--master-addr", lca.master_addr, "MASTER_ADDR every rank connects to (default launch.master_addr, else the first host's address)");
    launch->add_option("--backend", lca.backend,
                       "ptd-engine --backend for every rank: auto (default: CUDA for a GPU job where the host has it), "
                       "cpu, cuda, cuda-sim");
    launch->add_option("--profile", lca.profile,
                       "Cluster profile from ptd calibrate for the dashboard's speed prediction (default: the job's cluster.profile)");
    launch->add_flag("--preflight", lca.preflight,
                     "First run `ptd calibrate --check` on the same hosts; do not launch when a host is flagged");
    launch->add_flag("--force", lca.force, "With --preflight: launch even when a host is flagged");
    launch->add_option("--exclude-hosts", lca.exclude_hosts, "Hosts of --hosts FILE to leave out (comma-separated)")->delimiter(',');
    launch->add_option("--max-restarts", lca.max_restarts,
                       "Restart a failed run from its newest complete checkpoint up to N times (default launch.max_restarts)")
        ->check(CLI::Range(0, 1000));
    launch->add_option("--checkpoint-every", lca.checkpoint_every,
                       "Every rank writes a checkpoint every N steps (default launch.checkpoint_every; 0 = none)")
        ->check(CLI::Range(0, 1 << 30));
    launch->add_flag("--exclude-failed", lca.exclude_failed,
                     "With --max-restarts: restart without the failed host (re-planned), or stop saying why it cannot");
    launch->add_option("--set", lca.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);
    launch->add_option("ENGINE_ARGS", lca.engine_args, "After --: arguments for every ptd-engine (e.g. -- --checkpoint-every 10)");

    ptd::StopArgs sta;
    auto* stop = app.add_subcommand("stop", "Stop a run: scancel its Slurm job, or tear down its ptd launch on this machine");
    stop->add_option("RUN_DIR", sta.run_dir, "Run directory (runs/<run-id>) written by ptd launch")->required();
    stop->add_option("--wait", sta.wait_s, "Seconds to wait for the run to be over (default 120)")->check(ptd::cli::FiniteRange(1, 86400));

    ptd::CalibrateArgs ca;
    auto* calibrate = app.add_subcommand(
        "calibrate", "Probe the job's hosts (GEMMs, memory, collectives) and write a cluster profile; --check: flag slow hosts");
    auto* calibrate_job = calibrate->add_option("JOB", ca.launch.job, "Job spec file, @default or @tiny");
    calibrate->add_option("--collect", ca.collect,
                          "Assemble the profile (or --check) from a finished calibration's run directory: its rank logs, "
                          "e.g. after sbatch of --slurm's script")
        ->excludes(calibrate_job);
    auto* from_run = calibrate->add_option("--from-run", ca.from_run,
                          "Refine a profile with a finished training run's measured timeline (its in-step TP collective "
                          "costs); the profile is --profile FILE, else the run's job's cluster.profile")
        ->excludes(calibrate_job)->type_name("RUN_DIR");
    calibrate->add_option("--profile", ca.base_profile, "With --from-run: the profile to refine")->needs(from_run);
    calibrate->add_flag("--no-step-probe", ca.no_step_probe,
                        "Never end with the step probe (6 training steps where a host has more ranks than the cores they may use)");
    calibrate->add_option("-o,--output", ca.output,
                          "Profile file to write (default RUN_DIR/profile.toml; with --from-run the refined profile in place)");
    calibrate->add_flag("--quick", ca.quick, "Fewer repeats and message sizes (under 30 s on a small cluster)");
    calibrate->add_flag("--check", ca.check,
                        "Preflight: a quick probe on every host; flag hosts slower than the rest and map them onto the layout "
                        "(exit 1 when one is flagged); writes no profile");
    calibrate->add_option("--exclude-hosts", ca.launch.exclude_hosts, "Hosts of --hosts FILE to leave out (comma-separated)")
        ->delimiter(',');
    calibrate->add_option("--stall-timeout", ca.stall_s, "Seconds a probing rank may stay silent before calibration stops (default 120)")
        ->check(ptd::cli::FiniteRange(1.0, 86400.0));
    calibrate->add_option("--hosts", ca.launch.hosts, "DeepSpeed-style hostfile: probe these hosts over SSH");
    calibrate->add_flag("--dry-run", ca.launch.dry_run, "Print each host's exact probe commands and environment; connect nowhere");
    calibrate->add_flag("--upload", ca.launch.upload, "Copy the local ptd-engine to each host over SFTP (SHA-256 checked)");
    calibrate->add_flag("--accept-new-host-keys", ca.launch.accept_new_host_keys, "Record unknown SSH host keys");
    auto* calibrate_slurm = calibrate->add_flag("--slurm", ca.launch.slurm, "Write RUN_DIR/sbatch.sh that runs the probes (srun) instead of starting them");
    calibrate->add_flag("--submit", ca.launch.submit,
                        "With --slurm: submit the script (sbatch), follow the job with a line per probe and host, and write "
                        "the profile (or the --check verdict) when Slurm reports it finished")
        ->needs(calibrate_slurm);
    add_slurm_job_options(calibrate, calibrate_slurm, ca.launch);
    calibrate->add_option("--run-root", ca.launch.run_root, "Folder for run directories (default launch.run_dir)");
    calibrate->add_option("--run-id", ca.launch.run_id, "Run id (default YYYYMMDD-HHMMSS-PID)");
    calibrate->add_option("--engine", ca.launch.engine, "Local ptd-engine to run or upload (default: next to ptd, else PATH)");
    calibrate->add_option("--known-hosts", ca.launch.known_hosts, "known_hosts file (default ~/.ssh/known_hosts)");
    calibrate->add_option("--ssh-config", ca.launch.ssh_config, "ssh config file (default ~/.ssh/config)");
    calibrate->add_option("--master-addr", ca.launch.master_addr, "MASTER_ADDR every rank connects to");
    calibrate->add_option("--backend", ca.launch.backend, "ptd-engine --backend for every rank: auto, cpu, cuda, cuda-sim");
    calibrate->add_option("--set", ca.launch.sets, set_help)->type_name("KEY=VALUE")->allow_extra_args(false);

    // "ptd frobnicate": CLI11 would answer only "A subcommand is required"; name the word,
    // the commands there are and the nearest one.
    if (argc > 1 && argv[1][0] != '-') {
        const std::string word = argv[1];
        std::vector<std::string> names;
        for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
        if (std::find(names.begin(), names.end(), word) == names.end()) {
            std::string list;
            for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
            const std::string hint = ptd::closest_match(word, names);
            std::fprintf(stderr, "ptd: error: unknown command %s%s; allowed: %s\nRun 'ptd --help' for usage.\n",
                         ptd::quote_input(word).c_str(), hint.empty() ? "" : (" (did you mean \"" + hint + "\"?)").c_str(),
                         list.c_str());
            return ptd::kExitConfig;
        }
    }
    if (const std::optional<int> stop = ptd::parse_command_line(app, "ptd", argc, argv)) return *stop;

    // A run directory carries its own job: no presets needed.
    if (*trace) return ptd::cmd_trace(ta, stdout, stderr);
    if (*watch) {
        wa.sparklines = !no_sparklines;
        return ptd::cmd_watch(wa, stdout, stderr);
    }
    if (*stop) return ptd::cmd_stop(sta, stdout, stderr);

    auto presets = ptd::load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s", presets.error().str().c_str());
        return ptd::kExitConfig;
    }
    if (*validate) return ptd::cmd_validate(va, *presets, stdout, stderr);
    if (*layout) {
        la.color_by = color_by == "pp" ? ptd::ColorBy::pp : color_by == "dp" ? ptd::ColorBy::dp
                    : color_by == "cp" ? ptd::ColorBy::cp : ptd::ColorBy::tp;
        return ptd::cmd_layout(la, *presets, stdout, stderr);
    }
    if (*launch) return ptd::cmd_launch(lca, *presets, stdout, stderr);
    if (*calibrate) return ptd::cmd_calibrate(ca, *presets, stdout, stderr);
    if (*presets_cmd) return ptd::cmd_presets(pa, *presets, stdout, stderr);
    if (*estimate) {
        if (!compare_positional.empty()) ea.compare = compare_positional;
        return ptd::cmd_estimate(ea, *presets, stdout, stderr);
    }
    if (*plan) return ptd::cmd_plan(pl, *presets, stdout, stderr);
    if (*schedule) return ptd::cmd_schedule(sa, *presets, stdout, stderr);
    if (*export_cmd) {
        if (format == "jobset" || format == "trainjob") {
            if (!launcher.empty()) {
                std::fprintf(stderr, "ptd export: error: --launcher %s: with --format %s, which is itself the launch (ptd-engine's "
                                     "ranks in pods); allowed: --launcher with megatron, deepspeed, torchtitan, torchtitan-toml or nemo\n",
                             launcher.c_str(), format.c_str());
                return ptd::kExitConfig;
            }
            xa.k8s_form = format;
            return ptd::cmd_export(xa, *presets, stdout, stderr);
        }
        for (const auto& [flag, value] : {std::pair{"--image", &xa.image}, std::pair{"--run-root", &xa.run_root}, std::pair{"--run-id", &xa.run_id}})
            if (!value->empty()) {
                std::fprintf(stderr, "ptd export: error: %s: given with --format %s; allowed: %s only with --format jobset or trainjob\n",
                             flag, format.c_str(), flag);
                return ptd::kExitConfig;
            }
        xa.format = *ptd::parse_export_format(format);  // CLI11 checked the word
        if (!launcher.empty()) xa.launcher = *ptd::parse_launcher(launcher);
        return ptd::cmd_export(xa, *presets, stdout, stderr);
    }
    return ptd::kExitConfig;
}
