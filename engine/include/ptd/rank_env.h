// rank_env.h — the engine's environment contract, compatible with torchrun:
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
// Missing variables default to a single-process run (rank 0 of 1 on 127.0.0.1); a
// malformed one is an error naming the variable, its value and what is allowed.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include "ptd/common/diagnostic.h"

namespace ptd {

struct RankEnv {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;
    int local_world_size = 1;
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;
};

// `getenv` is injectable for tests; by default the process environment.
Result<RankEnv> read_rank_env(const std::function<const char*(const char*)>& getenv_fn = {});

// Sets the contract in this process's environment for rank `rank` of `world` ranks that
// all run on this one host (loopback rendezvous on `master_port`): what a test or bench sets
// in a forked child before it executes ptd-engine.
inline void set_single_host_rank_env(int rank, int world, int master_port) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
}

}  // namespace ptd
