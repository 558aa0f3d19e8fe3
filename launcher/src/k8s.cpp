// k8s.cpp — the JobSet and the TrainJob `ptd launch --k8s` writes (k8s.h). JobSet: one replicated Job of `nodes`
// indexed pods (completionMode Indexed: JOB_COMPLETION_INDEX is the node); each pod's
// script writes the run's job.toml, starts the node's ranks of ptd-engine and ends with the
// first rank that fails, which fails the Job and (failurePolicy maxRestarts 0) the whole
// JobSet: the "one rank fails, all stop" rule of the other transports. Field names and
// meanings: kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go (commit 08dfbdf).
// TrainJob: the same pod script on Kubeflow Trainer's torch-distributed runtime, which builds
// such a JobSet itself (kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go, 8c0f505).
#include "ptd/k8s.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <sstream>

namespace ptd {

namespace {

// A YAML double-quoted scalar: JSON's string escapes are YAML's.
std::string q(const std::string& s) { return nlohmann::json(s).dump(); }

// The pod's script: job.toml as the ranks read it, then this node's ranks. `prologue` sets
// `node` (the pod's index among the nodes) and whatever of the contract the pod's own
// environment does not hold yet.
std::string pod_script(const LaunchPlan& plan, const std::string& prologue) {
    const JobSpec& job = plan.job;
    std::ostringstream sh;
    sh << "set -u\n"
       << "mkdir -p " << shell_quote(plan.run_dir) << "\n"
       << "cat > " << shell_quote(plan.run_dir + "/job.toml") << " <<'PTD_JOB_TOML'\n"
       << plan.job_toml << (plan.job_toml.empty() || plan.job_toml.back() == '\n' ? "" : "\n") << "PTD_JOB_TOML\n"
       << prologue
       << "pids=()\n"
       << "trap 'kill -TERM \"${pids[@]}\" 2>/dev/null' TERM\n"
       << "for ((l = 0; l < LOCAL_WORLD_SIZE; l++)); do\n"
       << "  r=$((node * LOCAL_WORLD_SIZE + l))\n"
       << "  RANK=$r LOCAL_RANK=$l " << shell_quote(job.launch.engine)
       << " --job " << shell_quote(plan.run_dir + "/job.toml") << " --run-dir " << shell_quote(plan.run_dir);
    if (plan.steps > 0) sh << " --steps " << plan.steps;
    if (!plan.backend.empty()) sh << " --backend " << shell_quote(plan.backend);
    for (const std::string& a : plan.engine_args) sh << " " << shell_quote(a);
    sh << " > \"" << plan.run_dir << "/rank-$r.log\" 2>&1 &\n"
       << "  pids+=($!)\n"
       << "done\n"
       << "# One rank fails, all stop: the first non-zero exit ends the pod with its code. (Polled:\n"
       << "# bash 5.2's wait -n misses children that ended before it is called.)\n"
       << "rc=0\n"
       << "while ((${#pids[@]})); do\n"
       << "  for i in \"${!pids[@]}\"; do\n"
       << "    p=${pids[$i]}\n"
       << "    kill -0 \"$p\" 2>/dev/null && continue\n"
       << "    wait \"$p\"; s=$?; unset \"pids[$i]\"\n"
       << "    if ((s != 0)); then rc=$s; echo \"ptd: a rank of node $node exited $s; stopping the others\" >&2;"
          " kill -TERM \"${pids[@]}\" 2>/dev/null; break 2; fi\n"
       << "  done\n"
       << "  sleep 1\n"
       << "done\n"
       << "wait\n"
       << "exit $rc\n";

    return sh.str();
}

// apiVersion, kind, metadata (the run id as a label, for `kubectl get -l`) and "spec:".
std::string object_head(const std::string& api, const std::string& kind, const std::string& name, const std::string& run_id) {
    return "apiVersion: " + api + "\nkind: " + kind + "\nmetadata:\n  name: " + name + "\n  labels:\n    ptd/run-id: " + q(run_id) +
           "\nspec:\n";
}

// The manifest's YAML for the pod's script: a literal block under `args:` / `command:`.
std::string indented(const std::string& text, const std::string& indent) {
    std::string out;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) out += (l.empty() ? "" : indent + l) + "\n";
    return out;
}

}  // namespace

std::string k8s_jobset_name(const LaunchPlan& plan) {
    std::string out = "ptd-";
    for (char c : plan.run_id) {
        const char l = (char)std::tolower((unsigned char)c);
        out += std::isalnum((unsigned char)l) ? l : '-';
    }
    // Pod host names are <jobset>-<job>-<index>-<pod>: at most 63 characters.
    out = out.substr(0, 40);
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out;
}

std::string k8s_jobset(const LaunchPlan& plan, const std::string& image) {
    const JobSpec& job = plan.job;
    const bool gpus = job.cluster.gpu.name != "cpu";
    const std::string name = k8s_jobset_name(plan);
    const std::string replicated = "ranks";
    const int port = job.launch.master_port ? job.launch.master_port : 29500;
    const int per_node = job.cluster.gpus_per_node;

    std::vector<std::pair<std::string, std::string>> env = {
        {"MASTER_ADDR", name + "-" + replicated + "-0-0." + name},
        {"MASTER_PORT", std::to_string(port)},
        {"WORLD_SIZE", std::to_string(plan.ranks.size())},
        {"LOCAL_WORLD_SIZE", std::to_string(per_node)},
        {"PTD_RUN_ID", plan.run_id}};
    for (const auto& kv : forwarded_environment(job)) env.push_back(kv);

    std::ostringstream y;
    y << "# JobSet written by `ptd launch --k8s` for run " << plan.run_id << ": " << plan.ranks.size() << " ranks of ptd-engine, "
      << per_node << " per pod, one pod per node.\n"
      << "# Apply with: kubectl apply -f jobset.yaml (needs the JobSet controller, jobset.x-k8s.io/v1alpha2)\n"
      << object_head("jobset.x-k8s.io/v1alpha2", "JobSet", name, plan.run_id)
      << "  failurePolicy:\n"
      << "    maxRestarts: 0\n"
      << "  network:\n"
      << "    enableDNSHostnames: true\n"
      << "  replicatedJobs:\n"
      << "  - name: " << replicated << "\n"
      << "    replicas: 1\n"
      << "    template:\n"
      << "      spec:\n"
      << "        parallelism: " << job.cluster.nodes << "\n"
      << "        completions: " << job.cluster.nodes << "\n"
      << "        completionMode: Indexed\n"
      << "        backoffLimit: 0\n"
      << "        template:\n"
      << "          spec:\n"
      << "            restartPolicy: Never\n"
      << "            containers:\n"
      << "            - name: ptd-engine\n"
      << "              image: " << q(image) << "\n"
      << "              command: [\"bash\", \"-c\"]\n"
      << "              args:\n"
      << "              - |\n";
    y << indented(pod_script(plan, "node=${JOB_COMPLETION_INDEX:?set by the Indexed Job}\n"), "                ");
    y << "              env:\n";
    for (const auto& [k, v] : env) y << "              - name: " << k << "\n                value: " << q(v) << "\n";
    y << "              ports:\n"
      << "              - containerPort: " << port << "\n";
    if (gpus)
      y << "              resources:\n"
        << "                limits:\n"
        << "                  nvidia.com/gpu: " << per_node << "\n";
    y << "              volumeMounts:\n"
      << "              - name: dshm\n"
      << "                mountPath: /dev/shm\n"
      << "            volumes:\n"
      << "            - name: dshm\n"
      << "              emptyDir:\n"
      << "                medium: Memory\n";
    return y.str();
}

std::string k8s_trainjob(const LaunchPlan& plan, const std::string& image) {
    const JobSpec& job = plan.job;
    const std::string name = k8s_jobset_name(plan);
    // The torch plugin of Kubeflow Trainer (pkg/runtime/framework/plugins/torch/torch.go,
    // commit 8c0f505) gives the trainer container torchrun's PET_* variables: the node's
    // index (the Job completion index), the node and process counts, and pod 0 of the "node"
    // job on the JobSet's headless service as the master.
    const std::string prologue =
        "node=${PET_NODE_RANK:?set by the Kubeflow Trainer torch plugin}\n"
        "export MASTER_ADDR=$PET_MASTER_ADDR MASTER_PORT=$PET_MASTER_PORT LOCAL_WORLD_SIZE=$PET_NPROC_PER_NODE\n"
        "export WORLD_SIZE=$((PET_NNODES * PET_NPROC_PER_NODE))\n";
    std::vector<std::pair<std::string, std::string>> env = {{"PTD_RUN_ID", plan.run_id}};
    for (const auto& kv : forwarded_environment(job)) env.push_back(kv);
    std::ostringstream y;
    y << "# TrainJob written by `ptd launch --k8s` for run " << plan.run_id << ": " << plan.ranks.size()
      << " ranks of ptd-engine, " << job.cluster.gpus_per_node << " per node, on Kubeflow Trainer's torch-distributed runtime.\n"
      << "# Apply with: kubectl apply -f trainjob.yaml (needs Kubeflow Trainer v2, trainer.kubeflow.org/v1alpha1)\n"
      << object_head("trainer.kubeflow.org/v1alpha1", "TrainJob", name, plan.run_id)
      << "  runtimeRef:\n"
      << "    apiGroup: trainer.kubeflow.org\n"
      << "    kind: ClusterTrainingRuntime\n"
      << "    name: torch-distributed\n"
      << "  trainer:\n"
      << "    image: " << q(image) << "\n"
      << "    numNodes: " << job.cluster.nodes << "\n"
      << "    numProcPerNode: " << job.cluster.gpus_per_node << "\n"
      << "    command: [\"bash\", \"-c\"]\n"
      << "    args:\n"
      << "    - |\n"
      << indented(pod_script(plan, prologue), "      ")
      << "    env:\n";
    for (const auto& [k, v] : env) y << "    - name: " << k << "\n      value: " << q(v) << "\n";
    if (job.cluster.gpu.name != "cpu")
        y << "    resourcesPerNode:\n"
          << "      limits:\n"
          << "        nvidia.com/gpu: " << job.cluster.gpus_per_node << "\n";
    return y.str();
}

}  // namespace ptd
