// mem.h — memory categories of the engine's tagged allocator. Every buffer the engine
// allocates is tagged with one category so that per-rank current/peak bytes can be
// reported next to the estimators' prediction (issue #4, point 5).
#pragma once

#include <cstdint>

namespace ptd::engine {

enum MemCategory : int {
    MEM_PARAMS = 0,       // weights (the flat parameter buffer of this rank)
    MEM_GRADS,            // gradient accumulation buffer (flat, same shape as params)
    MEM_OPTIMIZER,        // Adam m and v (sharded over dp with ZeRO-1)
    MEM_ACTIVATIONS,      // tensors saved for backward (the ptd-engine activation profile)
    MEM_COMMUNICATION,    // p2p send/recv staging, gathered SP buffers
    MEM_WORKSPACE,        // temporaries of one op / one layer's backward
    MEM_CATEGORY_COUNT
};

// "params", "grads", "optimizer", "activations", "communication", "workspace".
const char* mem_category_name(MemCategory c);

struct MemStats {
    int64_t current[MEM_CATEGORY_COUNT] = {};  // bytes allocated now
    int64_t peak[MEM_CATEGORY_COUNT] = {};     // high-water mark of `current`, per category
    int64_t total_current = 0;
    int64_t total_peak = 0;                    // high-water mark of the sum (not Σ peaks)
};

}  // namespace ptd::engine
