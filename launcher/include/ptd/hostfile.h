// hostfile.h — the hosts a job runs on: a DeepSpeed-style hostfile ("host slots=N", with
// '#' comments), the job's cluster.hosts list, or `local` (every rank on this machine).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

struct HostEntry {
    std::string host;   // hostname or address (IPv6 without brackets)
    std::string user;   // "" = from ~/.ssh/config or the current user
    int port = 0;       // 0 = from ~/.ssh/config or the job's launch.port
    int slots = 0;      // ranks on this host; 0 = not given (cluster.gpus_per_node)
    int line = 0;       // line in the hostfile, 0 when not from a file
};

// Parse a hostfile. Each non-blank line: `[user@]host[:port] [slots=N]`; IPv6 addresses
// go in brackets when a port follows ("[::1]:2222"). A host listed twice is an error, as
// is a malformed token; every message names the file and line.
Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& file);
Result<std::vector<HostEntry>> read_hostfile(const std::string& path);

// The hosts of a job, one per node: `hostfile_override` if given, else launch.hostfile
// (relative to the job file's folder), else cluster.hosts, else — for local mode — one
// "localhost" per node. Checks that there is one host per node and that any slots value
// equals cluster.gpus_per_node.
Result<std::vector<HostEntry>> resolve_hosts(const JobSpec& job, const std::string& hostfile_override = {});

// The checks resolve_hosts makes on hosts from `source` (a file name or a label such as
// "hosts (Launch panel)"): one host per node, slots equal to cluster.gpus_per_node.
Result<std::vector<HostEntry>> check_hosts_for_job(const JobSpec& job, std::vector<HostEntry> hosts,
                                                   const std::string& source);

}  // namespace ptd
