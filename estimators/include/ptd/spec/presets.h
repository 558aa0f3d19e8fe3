// presets.h — model and GPU presets. The source of truth is assets/presets/*.toml
// (every figure with its source in a comment); the same files are compiled into the
// binaries so that ptd works from any directory. At run time a readable assets folder
// wins over the embedded copy; a malformed one is an error, never a silent fallback.
#pragma once

#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

// nccl: one node / network preset of assets/presets/clusters.toml.
struct ClusterPreset {
    std::string name, description;
    std::string gpu;              // GPU preset name
    int gpus_per_node = 8;
    int nics_per_node = 8;
    double nic_gbps = 0;          // Gb/s per NIC
    bool rail_optimized = true;
    bool nvls = false;
    double intra_gbps = 0;        // GB/s per GPU, one direction
    double host_memory_gib = 0;
    double pcie_gbps = 0;
    int nvlink_domain = 0;        // gb200: GPUs per NVLink domain (optional key; 0 = one node)
    double cpu_adam_params_per_s = 0;  // bits: the node's CPU-Adam rate, all its CPUs (offload)
    double host_op_us = 0;             // hostov: host µs per eager PyTorch op on the node's CPU (optional key)
    // Each GPU's share of the node's NIC line rate, GB/s (ClusterSpec::inter_gbps).
    double inter_gbps_per_gpu() const { return nics_per_node * nic_gbps / 8.0 / gpus_per_node; }
};

struct PresetCatalog {
    std::vector<ModelSpec> models;  // in file order (sorted by source line)
    std::vector<GpuSpec> gpus;      // in file order
    std::vector<ClusterPreset> clusters;  // nccl: in file order
    std::string origin;             // folder the files came from, or "<embedded>"

    const ModelSpec* find_model(std::string_view name) const;  // nullptr if unknown
    const GpuSpec* find_gpu(std::string_view name) const;
    std::vector<std::string> model_names() const;
    std::vector<std::string> gpu_names() const;
    const ClusterPreset* find_cluster(std::string_view name) const;
    std::vector<std::string> cluster_names() const;
    // The network a job naming `gpu` (a GPU preset) gets without a cluster preset: the first
    // cluster preset on that GPU; nullptr when none uses it.
    const ClusterPreset* default_cluster_for_gpu(std::string_view gpu) const;
};

// nccl: parse assets/presets/clusters.toml into cat.clusters (GPU names checked against
// cat.gpus). Errors name the file, line, key and what is allowed.
Result<void> parse_cluster_presets(PresetCatalog& cat, std::string_view clusters_toml, const std::string& file);
std::string_view embedded_clusters_toml();

// Parse the two preset documents. Top-level tables are preset names; their keys are the
// [model] keys of a job (models) and the [cluster.gpu] keys (gpus).
Result<PresetCatalog> parse_presets(std::string_view models_toml, const std::string& models_file,
                                    std::string_view gpus_toml, const std::string& gpus_file);

// The folder searched first: $PTD_ASSETS, then <exe>/../share/ptd/assets, <exe>/../assets,
// <exe>/../../assets and the source tree's assets/. Returns "" if none holds presets/.
std::string find_assets_dir();

// Presets from find_assets_dir(), or the embedded copy when there is none.
// PTD_ASSETS=embedded forces the embedded copy; a PTD_ASSETS folder without presets/ is
// an error.
Result<PresetCatalog> load_presets();

// The embedded copy only (always parses; a test checks it matches assets/).
const PresetCatalog& embedded_presets();

// The embedded text of assets/presets/models.toml and gpus.toml.
std::string_view embedded_models_toml();
std::string_view embedded_gpus_toml();

}  // namespace ptd
