// model_stats.h — parameter counts of a ModelSpec, by part. Used by `ptd presets`, the
// studio, and (issue 3) the memory and FLOP estimators.
#pragma once

#include <cstdint>

#include "ptd/spec/job_spec.h"

namespace ptd {

struct ParamCounts {
    int64_t embedding = 0;       // token embedding V·h (+ learned positions s·h)
    int64_t output = 0;          // untied output projection V·h (0 when tied)
    int64_t attention = 0;       // per layer: Q, K, V, O weights and biases (mla: MLA projections, latent / q-k norms)
    int64_t mlp = 0;             // per layer: MLP (all experts for MoE, + router)
    int64_t mlp_active = 0;      // per layer: MLP weights one token uses (top_k experts)
    int64_t norms = 0;           // per layer: the two norms
    int64_t final_norm = 0;
    int64_t per_layer = 0;       // attention + mlp + norms
    int64_t total = 0;           // everything, counting tied embeddings once
    int64_t non_embedding = 0;   // total − embedding − output (PaLM's N for 6N)
    int64_t active = 0;          // parameters one token touches (MoE: top_k experts)
    // ---- mla ----
    int64_t mtp = 0;             // the MTP modules (mtp_layers), not in total: embedding and head shared
    int64_t mtp_active = 0;      // of mtp, what one token touches
    // moe2: MoE models with shared experts and dense first layers (per layer, as above; mlp and
    // mlp_active are an MoE layer's and include the shared experts).
    int64_t shared_expert = 0;   // per MoE layer: the shared experts' MLP (every token passes it)
    int64_t dense_mlp = 0;       // per dense layer (model.first_dense_layers): MLP of ffn_hidden
    int moe_layers = 0;          // layers with routed experts (layers − first_dense_layers; 0 = dense model)
};

// Exact count for the architecture PTD models (no vocabulary padding).
ParamCounts count_parameters(const ModelSpec& m);

}  // namespace ptd
