// k8s.h — `ptd launch --k8s`: the plan's ranks as a Kubernetes JobSet
// (jobset.x-k8s.io/v1alpha2, kubernetes-sigs/jobset) or a Kubeflow Trainer TrainJob: one pod per node, each
// starting that node's ranks of ptd-engine with the same environment contract as a local,
// SSH or Slurm launch (RANK = pod index · gpus_per_node + LOCAL_RANK). Pure: writes text.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "ptd/launch.h"
#include "ptd/slurm.h"

namespace ptd {

// The JobSet manifest (YAML) for a plan made for a scheduler (LaunchOptions::slurm: ranks
// on nodes "node-0" ...); `image` holds ptd-engine (launch.engine on its PATH or at that
// path). MASTER_ADDR is pod 0's name on the headless service JobSet creates.
std::string k8s_jobset(const LaunchPlan& plan, const std::string& image);

// The same ranks as a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) on the
// `torch-distributed` ClusterTrainingRuntime: the runtime's torch plugin gives each node's
// pod torchrun's PET_* variables, from which the pod's script derives the contract.
std::string k8s_trainjob(const LaunchPlan& plan, const std::string& image);

// Pods per topology domain ([launch.k8s] topology_key): nodes_per_domain, else the job's
// NVLink domain in nodes (cluster.nvlink_domain, e.g. 18 for GB200 NVL72 of 4-GPU trays) when it
// spans more than one node and divides the nodes; else every node (the whole job in one
// domain). Without a topology_key: every node.
int k8s_nodes_per_domain(const JobSpec& job);

// The JobSet's (and TrainJob's) name: "ptd-" and the run id in lowercase letters, digits and '-'.
std::string k8s_jobset_name(const LaunchPlan& plan);

// The Secret both manifests take PTD_RUN_SECRET from (env valueFrom secretKeyRef, key
// PTD_RUN_SECRET): "<jobset>-secret". Pods off loopback need it (the engine's store refuses
// to serve without one); no manifest holds the value: `--apply` creates the Secret
// (k8s_create_secret), else the manifest's header says the command.
std::string k8s_secret_name(const LaunchPlan& plan);

// `kubectl create secret generic NAME --from-file=PTD_RUN_SECRET=FILE` with a fresh secret,
// written for kubectl to a 0600 file in `dir` that is removed afterwards (never on a command line).
Result<void> k8s_create_secret(const std::string& name, const std::string& dir);

// ---- A JobSet that runs (`ptd launch --k8s --apply`): followed and deleted through kubectl,
// as a Slurm run is through squeue and scancel (slurm.h). Pods are found by the label JobSet
// puts on every pod of the set, jobset.sigs.k8s.io/jobset-name (jobset_types.go JobSetNameKey);
// a pod's node is its Indexed Job's completion index (annotation
// batch.kubernetes.io/job-completion-index).

// One pod as `kubectl get pods -o json` lists it.
struct K8sPod {
    std::string name;
    int node = -1;                 // the completion index; -1 when the pod does not carry it
    std::string phase;             // Pending, Running, Succeeded, Failed, Unknown
    std::string host;              // spec.nodeName: the Kubernetes node it runs on ("" = not scheduled)
    std::string reason;            // why it waits or ended: a container's waiting / terminated
                                   // reason (ImagePullBackOff, OOMKilled, Error) or an unmet condition
    std::optional<int> exit_code;  // the container's exit code once it terminated
    std::string finished_at;       // when it terminated (RFC 3339, UTC: compares as text)
};

// The set's state from its pods: "PENDING" (no pod runs yet, or none listed yet), "RUNNING"
// (a pod runs, none failed), "SUCCEEDED" (every node's pod succeeded), "FAILED" (a pod
// failed); the pods sorted by node.
struct K8sJobState {
    std::string state;
    std::vector<K8sPod> pods;
    int failed_node = -1;          // the node of the pod that failed first (its container's
                                   // finishedAt; the Job then stops the others, which fail too)
};

// The state from `kubectl get pods -o json`'s output (a v1 List of Pods) for a set of
// `nodes` pods; an error quotes what does not have that shape.
Result<K8sJobState> k8s_state_from_pods(const std::string& kubectl_json, int nodes);

// Asks kubectl (the current context's cluster and namespace) for the set's pods; nullopt
// (why_not says why) when kubectl does not answer with a pod list.
std::optional<K8sJobState> k8s_job_state(const std::string& jobset_name, int nodes, std::string* why_not = nullptr);

// `kubectl logs POD`: the pod's output ("" when kubectl has none or fails).
std::string k8s_pod_log(const std::string& pod_name);

// The lines a pod's log holds for each rank ("[rank R] line", the pod script's form), by rank.
std::map<int, std::string> k8s_rank_lines(const std::string& pod_log);

// The first "ptd: rank R of node N exited S" line of a pod's log: R, else -1.
int k8s_failed_rank(const std::string& pod_log);

// What the state means for the run, as slurm_outcome says it for Slurm (run_state "" while
// pending or running, else "finished" or "failed").
SlurmOutcome k8s_outcome(const K8sJobState& state);

// `kubectl delete jobset NAME` and its Secret (k8s_secret_name), then wait (up to wait_s)
// until none of its pods is listed.
Result<void> k8s_delete(const std::string& jobset_name, double wait_s);

}  // namespace ptd
