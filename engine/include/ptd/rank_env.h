// rank_env.h — the engine's environment contract, compatible with torchrun:
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
// Missing variables default to a single-process run (rank 0 of 1 on 127.0.0.1); a
// malformed one is an error naming the variable, its value and what is allowed.
#pragma once

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

}  // namespace ptd
