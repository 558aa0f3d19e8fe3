// run_file.h — opens a bench/accuracy data file (published_runs.toml, published_memory.toml)
// and hands back its [[run]] tables, for bench_accuracy and bench_memory alike. A file that is
// not TOML, has no [[run]] array or a [[run]] that is not a table stops the program with
// "file:line: message" and exit status 2, as every other error in these files does.
// ttmem: it also holds what both benches must read the same way: a run's FSDP under pipeline
// parallelism, its loss, and the part of a prediction that a measured memory figure covers.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "ptd/estimate.h"

// `doc` owns the tables; the returned pointers live as long as it does.
inline std::vector<const toml::table*> load_run_tables(const std::string& path, toml::table& doc) {
    try {
        doc = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        std::fprintf(stderr, "%s:%d:%d: invalid TOML: %s\n", path.c_str(), (int)e.source().begin.line,
                     (int)e.source().begin.column, std::string(e.description()).c_str());
        std::exit(2);
    }
    const toml::array* arr = doc["run"].as_array();
    if (!arr || arr->empty()) {
        std::fprintf(stderr, "%s: no [[run]] entries\n", path.c_str());
        std::exit(2);
    }
    std::vector<const toml::table*> tables;
    for (const toml::node& n : *arr) {
        if (!n.is_table()) {
            std::fprintf(stderr, "%s:%d: each [[run]] must be a table\n", path.c_str(), (int)n.source().begin.line);
            std::exit(2);
        }
        tables.push_back(n.as_table());
    }
    return tables;
}

// FSDP (fsdp = true) as PTD's layout. Without pipeline parallelism it is ZeRO-3. With it,
// torchtitan (parallelize_llama.py apply_fsdp at 9dec370) keeps the blocks' parameters
// unsharded after forward (reshard_after_forward = False when pp is enabled) and
// torch.distributed.pipelining's stage (backward_maybe_with_nosync) defers FSDP's gradient
// reduce-scatter to the last micro-batch, so whole 16-bit parameters and whole fp32 (reduce
// dtype) gradients live through the step and only the fp32 parameter and Adam states stay
// sharded: Megatron's distributed optimizer (zero 0), not ZeRO-3 (which PTD refuses with
// pp > 1, as it re-gathers per micro-batch).
inline void apply_fsdp_layout(ptd::ParallelSpec& p) {
    if (p.pp > 1) {
        p.zero = 0;
        p.distributed_optimizer = true;
    } else {
        p.zero = 3;
    }
}

// torchtitan's loss: F.cross_entropy(pred.float()), compiled with training.compile from 2025
// (components/loss.py build_cross_entropy_loss) and never at 9dec370 (train.py: "compiling
// loss function causes CUDA errors, turning off for now"); the run file says which
// (compiled_loss).
inline ptd::CrossEntropyImpl pytorch_cross_entropy(bool compiled_loss) {
    return compiled_loss ? ptd::CrossEntropyImpl::pytorch_compiled : ptd::CrossEntropyImpl::pytorch;
}

// The part of one stage's prediction that a measured figure of `kind` covers:
//   max_reserved   model states + activations + temporary buffers + fragmentation
//                  (the caching allocator's segments; no CUDA context, no NCCL buffers)
//   max_allocated  model states + activations + temporary buffers (live tensors only)
//   nvidia-smi     everything, CUDA context and NCCL buffers included
inline double predicted_view_bytes(const ptd::MemoryBreakdown& m, const std::string& kind) {
    const double allocated = m.model_states() + m.activations + m.temp;
    if (kind == "max_allocated") return allocated;
    if (kind == "max_reserved") return allocated + m.fragmentation;
    return m.total();
}

// A published figure is the maximum over all GPUs: the stage whose prediction in that view
// is largest.
inline double predicted_view_gib(const ptd::Estimate& e, const std::string& kind) {
    double worst = 0;
    for (const ptd::StageEstimate& s : e.stages) worst = std::max(worst, predicted_view_bytes(s.mem, kind));
    return worst / (1024.0 * 1024.0 * 1024.0);
}
