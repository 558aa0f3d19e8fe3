// mem.cpp — names of the memory categories (mem.h).
#include "ptd/engine/mem.h"

namespace ptd::engine {

const char* mem_category_name(MemCategory c) {
    static const char* const names[MEM_CATEGORY_COUNT] = {"params", "grads", "optimizer", "activations",
                                                          "communication", "workspace"};
    return (c >= 0 && c < MEM_CATEGORY_COUNT) ? names[c] : "?";
}

}  // namespace ptd::engine
