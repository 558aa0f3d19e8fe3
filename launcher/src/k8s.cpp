// k8s.cpp — the JobSet and the TrainJob `ptd launch --k8s` writes (k8s.h). JobSet: one replicated Job of `nodes`
// indexed pods (completionMode Indexed: JOB_COMPLETION_INDEX is the node); each pod's
// script writes the run's job.toml, starts the node's ranks of ptd-engine and ends with the
// first rank that fails, which fails the Job and (failurePolicy maxRestarts 0) the whole
// JobSet: the "one rank fails, all stop" rule of the other transports. Field names and
// meanings: kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go (commit 08dfbdf).
// TrainJob: the same pod script on Kubeflow Trainer's torch-distributed runtime, which builds
// such a JobSet itself (kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go, 8c0f505).
// A JobSet applied with --apply is followed (pods' phases, their logs) and deleted through
// kubectl, as slurm.cpp follows a Slurm job.
#include "ptd/k8s.h"

#include "ptd/run_dir.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <sstream>
#include <thread>

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
       << "# Each rank in its own process group (set -m): its line of output goes to its log and,\n"
       << "# as \"[rank R] line\", to the pod's log (kubectl logs, which ptd watch reads); a stop\n"
       << "# signals the whole group, the engine included.\n"
       << "pids=()\n"
       << "trap 'kill -TERM \"${pids[@]/#/-}\" 2>/dev/null' TERM\n"
       << "set -m\n"
       << "for ((l = 0; l < LOCAL_WORLD_SIZE; l++)); do\n"
       << "  r=$((node * LOCAL_WORLD_SIZE + l))\n"
       << "  ( set -o pipefail; RANK=$r LOCAL_RANK=$l " << shell_quote(job.launch.engine)
       << " --job " << shell_quote(plan.run_dir + "/job.toml") << " --run-dir " << shell_quote(plan.run_dir);
    if (plan.steps > 0) sh << " --steps " << plan.steps;
    if (!plan.backend.empty()) sh << " --backend " << shell_quote(plan.backend);
    for (const std::string& a : plan.engine_args) sh << " " << shell_quote(a);
    sh << " 2>&1 | tee -a \"" << plan.run_dir << "/rank-$r.log\" | sed -u \"s/^/[rank $r] /\" ) &\n"
       << "  pids+=($!)\n"
       << "done\n"
       << "set +m\n"
       << "# One rank fails, all stop: the first non-zero exit ends the pod with its code. (Polled:\n"
       << "# bash 5.2's wait -n misses children that ended before it is called.)\n"
       << "rc=0\n"
       << "while ((${#pids[@]})); do\n"
       << "  for i in \"${!pids[@]}\"; do\n"
       << "    p=${pids[$i]}\n"
       << "    kill -0 \"$p\" 2>/dev/null && continue\n"
       << "    wait \"$p\"; s=$?; unset \"pids[$i]\"\n"
       << "    if ((s != 0)); then rc=$s; echo \"ptd: rank $((node * LOCAL_WORLD_SIZE + i)) of node $node exited $s; stopping the others\" >&2;"
          " kill -TERM \"${pids[@]/#/-}\" 2>/dev/null; break 2; fi\n"
       << "  done\n"
       << "  sleep 1\n"
       << "done\n"
       << "wait\n"
       << "exit $rc\n";

    return sh.str();
}

// The manifest's YAML for the pod's script: a literal block under `args:` / `command:`.
std::string indented(const std::string& text, const std::string& indent) {
    std::string out;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) out += (l.empty() ? "" : indent + l) + "\n";
    return out;
}

// apiVersion, kind, metadata (the run id as a label, for `kubectl get -l`; `annotations`
// as "key: value" lines) and "spec:".
std::string object_head(const std::string& api, const std::string& kind, const std::string& name, const std::string& run_id,
                        const std::string& annotations = "") {
    return "apiVersion: " + api + "\nkind: " + kind + "\nmetadata:\n  name: " + name + "\n  labels:\n    ptd/run-id: " + q(run_id) +
           "\n" + (annotations.empty() ? "" : "  annotations:\n" + indented(annotations, "    ")) + "spec:\n";
}

// JobSet's annotation for exclusive placement of each child Job in one topology domain (the
// nodes sharing the label's value): ExclusiveKey, kubernetes-sigs/jobset jobset_types.go (0336a8f).
const char* const kExclusiveTopology = "alpha.jobset.sigs.k8s.io/exclusive-topology";

// The GPU-product node selector ([launch.k8s] gpu_product) as YAML lines at `indent`; "" without one.
std::string node_selector(const K8sSpec& k, const std::string& indent) {
    if (k.gpu_product.empty()) return "";
    return indent + "nodeSelector:\n" + indent + "  " + q(k.gpu_product_label) + ": " + q(k.gpu_product) + "\n";
}

std::string secret_name_of(const std::string& jobset_name) { return jobset_name + "-secret"; }

// The container's PTD_RUN_SECRET, from the run's Secret (as YAML list entries at `indent`).
std::string secret_env(const LaunchPlan& plan, const std::string& indent);

// The manifest's comment saying how to make the Secret it needs.
std::string secret_howto(const LaunchPlan& plan);

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

std::string k8s_secret_name(const LaunchPlan& plan) { return secret_name_of(k8s_jobset_name(plan)); }

int k8s_nodes_per_domain(const JobSpec& job) {
    const K8sSpec& k = job.launch.k8s;
    const int nodes = std::max(1, job.cluster.nodes);
    if (k.topology_key.empty()) return nodes;
    if (k.nodes_per_domain > 0) return nodes % k.nodes_per_domain == 0 ? k.nodes_per_domain : nodes;
    // The job's NVLink domain (job_spec.h job_nvlink_domain: every domain holds the same ranks).
    const int domain = job.cluster.gpus_per_node > 0 ? job.cluster.job_nvlink_domain() / job.cluster.gpus_per_node : 1;
    return domain > 1 && nodes % domain == 0 ? domain : nodes;
}

namespace {
std::string secret_env(const LaunchPlan& plan, const std::string& indent) {
    return indent + "- name: PTD_RUN_SECRET\n" + indent + "  valueFrom:\n" + indent + "    secretKeyRef:\n" + indent +
           "      name: " + k8s_secret_name(plan) + "\n" + indent + "      key: PTD_RUN_SECRET\n";
}

std::string secret_howto(const LaunchPlan& plan) {
    return "# First the ranks' rendezvous secret (ptd launch --apply makes it): kubectl create secret generic " +
           k8s_secret_name(plan) + " --from-literal=PTD_RUN_SECRET=\"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\"\n";
}
}  // namespace

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

    // Topology ([launch.k8s] topology_key): one Job per domain of `per_domain` pods, each Job
    // placed alone in one domain by JobSet; a pod's node is then its Job's index · per_domain +
    // its completion index (the Job's index from the annotation JobSet puts on its pods).
    const K8sSpec& k = job.launch.k8s;
    const int per_domain = k8s_nodes_per_domain(job);
    const int domains = std::max(1, job.cluster.nodes) / per_domain;
    const std::string node =
        domains > 1 ? "node=$((${JOB_INDEX:?set from the JobSet job-index annotation} * " + std::to_string(per_domain) +
                          " + ${JOB_COMPLETION_INDEX:?set by the Indexed Job}))\n"
                    : "node=${JOB_COMPLETION_INDEX:?set by the Indexed Job}\n";
    std::ostringstream y;
    y << "# JobSet written by `ptd launch --k8s` for run " << plan.run_id << ": " << plan.ranks.size() << " ranks of ptd-engine, "
      << per_node << " per pod, one pod per node.\n"
      << "# Apply with: kubectl apply -f jobset.yaml (needs the JobSet controller, jobset.x-k8s.io/v1alpha2)\n"
      << secret_howto(plan);
    if (!k.topology_key.empty())
        y << "# Topology: " << domains << " Job(s) of " << per_domain << " pod(s), each alone in one domain of nodes sharing the label "
          << k.topology_key << " (launch.k8s.topology_key)\n";
    y << object_head("jobset.x-k8s.io/v1alpha2", "JobSet", name, plan.run_id,
                     k.topology_key.empty() ? "" : std::string(kExclusiveTopology) + ": " + q(k.topology_key) + "\n")
      << "  failurePolicy:\n"
      << "    maxRestarts: 0\n"
      << "  network:\n"
      << "    enableDNSHostnames: true\n"
      << "  replicatedJobs:\n"
      << "  - name: " << replicated << "\n"
      << "    replicas: " << domains << "\n"
      << "    template:\n"
      << "      spec:\n"
      << "        parallelism: " << per_domain << "\n"
      << "        completions: " << per_domain << "\n"
      << "        completionMode: Indexed\n"
      << "        backoffLimit: 0\n"
      << "        template:\n"
      << "          spec:\n"
      << "            restartPolicy: Never\n"
      << node_selector(k, "            ")
      << "            containers:\n"
      << "            - name: ptd-engine\n"
      << "              image: " << q(image) << "\n"
      << "              command: [\"bash\", \"-c\"]\n"
      << "              args:\n"
      << "              - |\n";
    y << indented(pod_script(plan, node), "                ");
    y << "              env:\n";
    for (const auto& [key, v] : env) y << "              - name: " << key << "\n                value: " << q(v) << "\n";
    if (domains > 1)
        y << "              - name: JOB_INDEX\n"
          << "                valueFrom:\n"
          << "                  fieldRef:\n"
          << "                    fieldPath: metadata.annotations['jobset.sigs.k8s.io/job-index']\n";
    y << secret_env(plan, "              ");
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
    const K8sSpec& k = job.launch.k8s;
    const bool whole_job_in_one_domain = k8s_nodes_per_domain(job) == std::max(1, job.cluster.nodes);
    std::ostringstream y;
    y << "# TrainJob written by `ptd launch --k8s` for run " << plan.run_id << ": " << plan.ranks.size()
      << " ranks of ptd-engine, " << job.cluster.gpus_per_node << " per node, on Kubeflow Trainer's torch-distributed runtime.\n"
      << "# Apply with: kubectl apply -f trainjob.yaml (needs Kubeflow Trainer v2, trainer.kubeflow.org/v1alpha1)\n"
      << secret_howto(plan)
      << (!k.topology_key.empty() && !whole_job_in_one_domain
              ? "# launch.k8s.topology_key: one Job per domain needs the JobSet form (jobset.yaml); the runtime's one Job has no topology hint here\n"
              : "")
      << object_head("trainer.kubeflow.org/v1alpha1", "TrainJob", name, plan.run_id)
      << "  runtimeRef:\n"
      << "    apiGroup: trainer.kubeflow.org\n"
      << "    kind: ClusterTrainingRuntime\n"
      << "    name: torch-distributed\n";
    // Topology and the node selector reach the runtime's JobSet through a runtime patch (only
    // labels and annotations of its metadata, and these pod fields, may be patched).
    const bool annotate = !k.topology_key.empty() && whole_job_in_one_domain;
    if (annotate || !k.gpu_product.empty()) {
        y << "  runtimePatches:\n"
          << "  - manager: ptd\n"
          << "    trainingRuntimeSpec:\n"
          << "      template:\n";
        if (annotate)
            y << "        metadata:\n"
              << "          annotations:\n"
              << "            " << kExclusiveTopology << ": " << q(k.topology_key) << "\n";
        if (!k.gpu_product.empty())
            y << "        spec:\n"
              << "          replicatedJobs:\n"
              << "          - name: node\n"
              << "            template:\n"
              << "              spec:\n"
              << "                template:\n"
              << "                  spec:\n"
              << node_selector(k, "                    ");
    }
    y
      << "  trainer:\n"
      << "    image: " << q(image) << "\n"
      << "    numNodes: " << job.cluster.nodes << "\n"
      << "    numProcPerNode: " << job.cluster.gpus_per_node << "\n"
      << "    command: [\"bash\", \"-c\"]\n"
      << "    args:\n"
      << "    - |\n"
      << indented(pod_script(plan, prologue), "      ")
      << "    env:\n";
    for (const auto& [key, v] : env) y << "    - name: " << key << "\n      value: " << q(v) << "\n";
    y << secret_env(plan, "    ");
    if (job.cluster.gpu.name != "cpu")
        y << "    resourcesPerNode:\n"
          << "      limits:\n"
          << "        nvidia.com/gpu: " << job.cluster.gpus_per_node << "\n";
    return y.str();
}

// ---- Following and deleting an applied JobSet through kubectl ----------------------------

namespace {
constexpr double kKubectlTimeoutS = 20;  // an API server that does not answer must not hang ptd watch
const char* const kJobSetNameLabel = "jobset.sigs.k8s.io/jobset-name";
const char* const kCompletionIndex = "batch.kubernetes.io/job-completion-index";

std::string first_line_of(const std::string& s) {
    std::string t = s.substr(0, s.find('\n'));
    while (!t.empty() && std::isspace((unsigned char)t.back())) t.pop_back();
    return t;
}

std::string string_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
    const nlohmann::json* at = &j;
    for (const char* k : path) {
        if (!at->is_object() || !at->contains(k)) return "";
        at = &(*at)[k];
    }
    return at->is_string() ? at->get<std::string>() : "";
}

// A pod from its JSON: phase, node index, host, why it waits or ended.
K8sPod pod_from_json(const nlohmann::json& item) {
    K8sPod p;
    p.name = string_at(item, {"metadata", "name"});
    const std::string index = string_at(item, {"metadata", "annotations", kCompletionIndex});
    if (!index.empty() && std::all_of(index.begin(), index.end(), [](char c) { return std::isdigit((unsigned char)c); }) &&
        index.size() < 9)
        p.node = std::stoi(index);
    p.phase = string_at(item, {"status", "phase"});
    p.host = string_at(item, {"spec", "nodeName"});
    p.reason = string_at(item, {"status", "reason"});  // "Evicted", "DeadlineExceeded"
    const nlohmann::json* statuses = nullptr;
    if (item.contains("status") && item["status"].is_object() && item["status"].contains("containerStatuses"))
        statuses = &item["status"]["containerStatuses"];
    if (statuses && statuses->is_array())
        for (const nlohmann::json& c : *statuses) {
            if (!c.is_object() || !c.contains("state") || !c["state"].is_object()) continue;
            const nlohmann::json& st = c["state"];
            if (st.contains("terminated") && st["terminated"].is_object()) {
                const nlohmann::json& t = st["terminated"];
                if (t.contains("exitCode") && t["exitCode"].is_number_integer()) p.exit_code = t["exitCode"].get<int>();
                if (p.reason.empty()) p.reason = string_at(t, {"reason"});
                p.finished_at = string_at(t, {"finishedAt"});
            } else if (st.contains("waiting") && p.reason.empty()) {
                p.reason = string_at(st, {"waiting", "reason"});  // ImagePullBackOff, ContainerCreating
            }
        }
    // A pod the scheduler cannot place says so in its PodScheduled condition.
    if (p.reason.empty() && item.contains("status") && item["status"].is_object() && item["status"].contains("conditions") &&
        item["status"]["conditions"].is_array())
        for (const nlohmann::json& c : item["status"]["conditions"])
            if (string_at(c, {"type"}) == "PodScheduled" && string_at(c, {"status"}) == "False") {
                p.reason = string_at(c, {"reason"});
                if (const std::string m = string_at(c, {"message"}); !m.empty()) p.reason += " (" + first_line_of(m) + ")";
            }
    return p;
}
}  // namespace

Result<K8sJobState> k8s_state_from_pods(const std::string& kubectl_json, int nodes) {
    nlohmann::json j = nlohmann::json::parse(kubectl_json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("items") || !j["items"].is_array())
        return fail(SourceLoc{}, "kubectl get pods",
                    "expected a JSON list of pods ({\"kind\": \"List\", \"items\": [...]}); got " +
                        quote_input(first_line_of(kubectl_json)));
    K8sJobState s;
    for (const nlohmann::json& item : j["items"])
        if (item.is_object()) s.pods.push_back(pod_from_json(item));
    std::stable_sort(s.pods.begin(), s.pods.end(), [](const K8sPod& a, const K8sPod& b) { return a.node < b.node; });
    int running = 0, succeeded = 0;
    const K8sPod* first_failed = nullptr;
    for (const K8sPod& p : s.pods) {
        if (p.phase == "Failed" && (!first_failed || (!p.finished_at.empty() && (first_failed->finished_at.empty() ||
                                                                                  p.finished_at < first_failed->finished_at))))
            first_failed = &p;
        running += p.phase == "Running";
        succeeded += p.phase == "Succeeded";
    }
    if (first_failed) s.state = "FAILED", s.failed_node = first_failed->node;
    if (s.state.empty())
        s.state = succeeded >= nodes && succeeded == (int)s.pods.size() ? "SUCCEEDED" : running + succeeded > 0 ? "RUNNING" : "PENDING";
    return s;
}

std::optional<K8sJobState> k8s_job_state(const std::string& jobset_name, int nodes, std::string* why_not) {
    const CommandOutput o = run_command({"kubectl", "get", "pods", "-l", std::string(kJobSetNameLabel) + "=" + jobset_name, "-o", "json"},
                                        kKubectlTimeoutS);
    std::string why;
    if (!o.ran) why = "kubectl: " + o.error;
    else if (o.timed_out) why = "kubectl: no answer within 20 s";
    else if (o.status != 0) why = "kubectl: " + first_line_of(o.err.empty() ? o.out : o.err);
    else if (auto s = k8s_state_from_pods(o.out, nodes)) return *s;
    else why = s.error().one_line();
    if (why_not) *why_not = "JobSet " + jobset_name + " unknown (" + why + ")";
    return std::nullopt;
}

std::string k8s_pod_log(const std::string& pod_name) {
    const CommandOutput o = run_command({"kubectl", "logs", pod_name}, kKubectlTimeoutS);
    return o.ran && !o.timed_out && o.status == 0 ? o.out : "";
}

std::map<int, std::string> k8s_rank_lines(const std::string& pod_log) {
    std::map<int, std::string> out;
    std::istringstream in(pod_log);
    for (std::string line; std::getline(in, line);) {
        if (!line.starts_with("[rank ")) continue;
        const size_t close = line.find("] ", 6);
        if (close == std::string::npos || close == 6 || close > 15) continue;
        const std::string digits = line.substr(6, close - 6);
        if (!std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit((unsigned char)c); })) continue;
        out[std::stoi(digits)] += line.substr(close + 2) + "\n";
    }
    return out;
}

int k8s_failed_rank(const std::string& pod_log) {
    std::istringstream in(pod_log);
    for (std::string line; std::getline(in, line);) {
        int rank = -1, node = -1, status = 0;
        if (std::sscanf(line.c_str(), "ptd: rank %d of node %d exited %d", &rank, &node, &status) == 3) return rank;
    }
    return -1;
}

SlurmOutcome k8s_outcome(const K8sJobState& s) {
    auto why = [](const K8sPod& p) {
        std::string w = p.reason;
        if (p.exit_code) w += (w.empty() ? "" : ", ") + std::string("exit code ") + std::to_string(*p.exit_code);
        return w;
    };
    if (s.state == "SUCCEEDED") return {"finished", "completed: every pod succeeded"};
    if (s.state == "FAILED")
        for (const K8sPod& p : s.pods)
            if (p.phase == "Failed" && p.node == s.failed_node)
                return {"failed", "pod " + p.name + " (node " + std::to_string(p.node) + (p.host.empty() ? "" : " on " + p.host) +
                                      ") failed" + (why(p).empty() ? "" : ": " + why(p))};
    if (s.state == "RUNNING") return {"", "running"};
    for (const K8sPod& p : s.pods)
        if (!p.reason.empty()) return {"", "waiting: pod " + p.name + " " + p.phase + ": " + p.reason};
    return {"", s.pods.empty() ? "waiting: no pods listed yet" : "waiting: pods pending"};
}

Result<void> k8s_create_secret(const std::string& name, const std::string& dir) {
    auto secret = make_run_secret();
    if (!secret) return std::unexpected(secret.error());
    const std::string file = dir + "/.ptd-run-secret";
    if (auto w = write_new_file(file, *secret, 0600); !w) return std::unexpected(w.error());
    const CommandOutput c =
        run_command({"kubectl", "create", "secret", "generic", name, "--from-file=PTD_RUN_SECRET=" + file}, kKubectlTimeoutS);
    std::remove(file.c_str());
    if (!c.ran) return fail(SourceLoc{}, "kubectl", "cannot run kubectl (" + c.error + ")");
    if (c.timed_out || c.status != 0)
        return fail(SourceLoc{}, "kubectl", "kubectl create secret generic " + name + " failed" +
                                                (c.timed_out ? std::string(" (no answer within 20 s)") : "") + ": " + first_line_of(c.err + c.out));
    return {};
}

Result<void> k8s_delete(const std::string& jobset_name, double wait_s) {
    // The Secret first: nothing else uses it, and a failed set delete must not leave it behind.
    (void)run_command({"kubectl", "delete", "secret", secret_name_of(jobset_name), "--ignore-not-found"}, kKubectlTimeoutS);
    const CommandOutput d = run_command({"kubectl", "delete", "jobsets.jobset.x-k8s.io", jobset_name}, kKubectlTimeoutS);
    if (!d.ran) return fail(SourceLoc{}, "kubectl", "cannot run kubectl (" + d.error + ")");
    // A set already deleted is what was asked for; its pods may still be going.
    if ((d.timed_out || d.status != 0) && (d.err + d.out).find("NotFound") == std::string::npos)
        return fail(SourceLoc{}, "kubectl", "kubectl delete jobset " + jobset_name + " failed: " + first_line_of(d.err + d.out));
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        std::string why;
        const auto s = k8s_job_state(jobset_name, 1, &why);
        if (!s) return fail(SourceLoc{}, "kubectl", why);
        if (s->pods.empty()) return {};
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > wait_s)
            return fail(SourceLoc{}, "kubectl", std::to_string(s->pods.size()) + " pod(s) of JobSet " + jobset_name + " still listed " +
                                                    std::to_string((int)wait_s) + " s after kubectl delete (first: " + s->pods[0].name + ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
}

}  // namespace ptd
