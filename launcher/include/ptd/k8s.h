// k8s.h — `ptd launch --k8s`: the plan's ranks as a Kubernetes JobSet
// (jobset.x-k8s.io/v1alpha2, kubernetes-sigs/jobset) or a Kubeflow Trainer TrainJob: one pod per node, each
// starting that node's ranks of ptd-engine with the same environment contract as a local,
// SSH or Slurm launch (RANK = pod index · gpus_per_node + LOCAL_RANK). Pure: writes text.
#pragma once

#include <string>

#include "ptd/launch.h"

namespace ptd {

// The JobSet manifest (YAML) for a plan made for a scheduler (LaunchOptions::slurm: ranks
// on nodes "node-0" ...); `image` holds ptd-engine (launch.engine on its PATH or at that
// path). MASTER_ADDR is pod 0's name on the headless service JobSet creates.
std::string k8s_jobset(const LaunchPlan& plan, const std::string& image);

// The same ranks as a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) on the
// `torch-distributed` ClusterTrainingRuntime: the runtime's torch plugin gives each node's
// pod torchrun's PET_* variables, from which the pod's script derives the contract.
std::string k8s_trainjob(const LaunchPlan& plan, const std::string& image);

// The JobSet's (and TrainJob's) name: "ptd-" and the run id in lowercase letters, digits and '-'.
std::string k8s_jobset_name(const LaunchPlan& plan);

}  // namespace ptd
