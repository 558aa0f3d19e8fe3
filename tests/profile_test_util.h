// profile_test_util.h — a small valid cluster profile (schema ptd.profile/1) for the tests
// that pass one through to a prediction (launch, watch, schedule, the studio): fitted from a
// GEMM and a memory-copy sample at the rates given, as `ptd calibrate` fits its probes.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "ptd/spec/cluster_profile.h"

namespace ptd_test {

// A profile of one host for jobs on `gpu`, measured at `measured_at`: GEMMs at
// `gemm_flops_per_s`, device memory copies at `copy_bytes_per_s`.
inline ptd::ClusterProfile fitted_profile(const std::string& gpu, const std::string& measured_at, double gemm_flops_per_s,
                                          double copy_bytes_per_s) {
    ptd::ClusterProfile p;
    p.measured_at = measured_at, p.gpu = gpu, p.precision = gpu == "cpu" ? "fp32" : "bf16";
    p.job = "job.toml", p.ptd_version = "0.1.0", p.ranks_per_host = 8;
    p.hosts.push_back({"localhost", "test-host", 8, "test CPU", 8, 0, 16.0, "", gpu == "cpu" ? "cpu" : "cuda", ""});
    ptd::ProfileSample gemm;
    gemm.kind = "gemm", gemm.name = "qkv.fwd", gemm.dtype = gpu == "cpu" ? "f32" : "bf16", gemm.shape = {512, 512, 512};
    gemm.flops = 2.0 * 512 * 512 * 512, gemm.median_s = gemm.flops / gemm_flops_per_s, gemm.repeats = 5;
    ptd::ProfileSample copy;
    copy.kind = "memory", copy.name = "copy", copy.bytes = 1e9, copy.median_s = 1e9 / copy_bytes_per_s, copy.repeats = 5;
    p.samples = {gemm, copy};
    ptd::fit_profile(p);
    return p;
}

// Writes `p` as its TOML file (folders made).
inline void write_profile(const std::string& path, const ptd::ClusterProfile& p) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    std::ofstream(path, std::ios::binary) << ptd::profile_toml(p);
}

}  // namespace ptd_test
