// pipeline_layout.h — Megatron-core's pipeline layout strings (--pipeline-model-parallel-layout,
// TransformerConfig.pipeline_model_parallel_layout): which layers each pipeline chunk holds,
// "Et|(tt|)*30mL" for DeepSeek-V3 on 8 stages × 4 virtual stages. PTD reads them into
// parallel.layers_per_stage (one entry per chunk, transformer layers only).
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace ptd {

// What one chunk holds: E the embedding, t a transformer (decoder) layer, m an MTP layer, L the
// output layer and loss.
struct LayoutChunk {
    int decoder = 0, mtp = 0;
    bool embedding = false, loss = false;
};

// The chunks in layer order (chunk c·pp + i is virtual stage c of stage i, as
// layers_per_stage lists them).
struct PipelineLayout {
    std::vector<LayoutChunk> chunks;
};

// Parses Megatron-core's syntax (pipeline_parallel_layer_layout.py parse_str_to_list): chunks
// separated by "|", the letters E, t, m, L, "x*n" repeats a letter, "(…)*n" repeats a
// group (groups do not nest), commas are cosmetic. The error says what was given and what is
// allowed, without the key (the caller names it). At most kMaxLayoutItems letters after the
// repetitions are unrolled.
constexpr long long kMaxLayoutItems = 1'000'000;
std::expected<PipelineLayout, std::string> parse_pipeline_layout(std::string_view text);

// Checks a parsed layout against a model and layout as Megatron-core's validate_layer_layout
// does, plus what PTD's model of the pipeline assumes: pp·vpp chunks (vpp 1 = one per stage),
// the embedding exactly once, first in chunk 0; the loss exactly once, in the last chunk;
// `layers` transformer layers; `mtp_layers` MTP layers, all in the last chunk (PTD runs the MTP
// modules beside the loss). The error names what differs and what is allowed.
std::expected<void, std::string> check_pipeline_layout(const PipelineLayout& layout, int pp, int vpp, int layers,
                                                       int mtp_layers);

// The transformer layers of each chunk (pp·vpp entries; pp when vpp = 1): layers_per_stage.
std::vector<int> layout_layers_per_chunk(const PipelineLayout& layout);

// The layout of a split (transformer layers per chunk, in layer order): the embedding in the
// first chunk, `mtp_layers` MTP layers and the loss in the last.
PipelineLayout layout_of_split(const std::vector<int>& layers_per_chunk, int mtp_layers);

// Megatron-core's text for a layout, compact: "t*n" for n layers, and a run of three or more
// equal chunks as "(…|)*n" — "Et|(t*2|)*30mL". parse_pipeline_layout reads it back.
std::string format_pipeline_layout(const PipelineLayout& layout);

// ttsplit: the transformer layers of each of `chunks` pipeline chunks (pp·vpp) that torchtitan
// builds when its job names no split, by the date of its code (yyyymm; 0 = today's):
//  - before kTorchtitanWeightedSplitFrom, generate_split_points (pipelining_utils.py): the
//    first chunk takes layers / chunks, the middle ones one more while the remainder lasts,
//    the last what is left;
//  - from it (torchtitan PR #1416, merged 2025-07, generate_llm_fqn_per_model_part with
//    pipeline_parallel_first/last_stage_less_layers = 1): the embedding and the output count
//    as a layer each, layers + 2 are spread evenly with the remainder on the first chunks,
//    and the first and last chunk hold one transformer layer fewer.
// Empty where torchtitan raises (more chunks than it can fill).
constexpr int kTorchtitanWeightedSplitFrom = 202508;
std::vector<int> torchtitan_default_split(int layers, int chunks, int framework_version);

}  // namespace ptd
