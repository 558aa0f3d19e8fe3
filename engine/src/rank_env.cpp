// rank_env.cpp — parse and cross-check the torchrun-style environment contract.
#include "ptd/rank_env.h"

#include <charconv>
#include <cstdlib>

namespace ptd {

Result<RankEnv> read_rank_env(const std::function<const char*(const char*)>& getenv_fn) {
    auto get = [&](const char* name) -> const char* {
        return getenv_fn ? getenv_fn(name) : std::getenv(name);
    };
    RankEnv env;
    std::vector<Diagnostic> problems;
    auto read_int = [&](const char* name, int& out, long long min, long long max) {
        const char* v = get(name);
        if (!v) return;
        std::string_view s(v);
        long long x = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
        if (s.empty() || ec != std::errc() || p != s.data() + s.size() || x < min || x > max) {
            problems.push_back({SourceLoc{"environment"}, name,
                                "got \"" + std::string(s) + "\"; allowed: an integer " + std::to_string(min) +
                                    " .. " + std::to_string(max)});
            return;
        }
        out = (int)x;
    };
    read_int("WORLD_SIZE", env.world_size, 1, 1 << 24);
    read_int("RANK", env.rank, 0, (1 << 24) - 1);
    // Without LOCAL_* the run is one node: every rank is local.
    env.local_world_size = env.world_size;
    read_int("LOCAL_WORLD_SIZE", env.local_world_size, 1, 1 << 16);
    env.local_rank = env.rank % env.local_world_size;  // local_world_size ≥ 1 here
    read_int("LOCAL_RANK", env.local_rank, 0, (1 << 16) - 1);
    read_int("MASTER_PORT", env.master_port, 1, 65535);
    if (const char* a = get("MASTER_ADDR")) {
        env.master_addr = a;
        if (env.master_addr.empty())
            problems.push_back({SourceLoc{"environment"}, "MASTER_ADDR", "empty; allowed: a hostname or address"});
    }
    if (problems.empty()) {
        if (env.rank >= env.world_size)
            problems.push_back({SourceLoc{"environment"}, "RANK",
                                "got " + std::to_string(env.rank) + " with WORLD_SIZE " +
                                    std::to_string(env.world_size) + "; allowed: 0 .. WORLD_SIZE-1"});
        if (env.local_rank >= env.local_world_size)
            problems.push_back({SourceLoc{"environment"}, "LOCAL_RANK",
                                "got " + std::to_string(env.local_rank) + " with LOCAL_WORLD_SIZE " +
                                    std::to_string(env.local_world_size) + "; allowed: 0 .. LOCAL_WORLD_SIZE-1"});
    }
    if (!problems.empty()) return std::unexpected(Error(std::move(problems)));
    return env;
}

}  // namespace ptd
