// perf_recipes.cpp — the Megatron-Bridge performance recipes PTD knows by name (training.recipe,
// mbrecipe, issue 29 point 1): Megatron-Bridge's perf_recipes for its MoE models — DeepSeek-V3,
// Qwen3-30B-A3B, Qwen3-235B-A22B on H100, B200 and GB200 — as NVIDIA-NeMo/Megatron-Bridge
// commit 067f987 (2026-08-22) has them under src/megatron/bridge/perf_recipes. Each row is a
// recipe function's effective configuration after everything it calls (the family's base
// config, _benchmark_common, _enable_hybridep_full_iteration_mxfp8 and the like; later
// assignments win), read off the code; keys no step of the chain sets carry Megatron-core's
// defaults at the commit Megatron-Bridge pins (Megatron-LM 2a75ac1).
// What the rows state in PTD's terms:
//  - dispatcher: moe_token_dispatcher_type "alltoall", or "flex" with its
//    moe_flex_dispatcher_backend ("deepep", "hybridep");
//  - a2a_overlap: comm_overlap.overlap_moe_expert_parallel_comm, what the performance scripts
//    read (cfg.model.moe_a2a_overlap, which some recipes also set, is no Megatron-core field);
//  - graphs: cuda_graph_impl and cuda_graph_scope. "full_iteration" as the impl (the
//    full-iteration helpers) and "local" with scope "full_iteration" (the paged-stash recipes)
//    are PTD's local impl with scope full_iteration; both run HybridEP's paged stash with a
//    static expert-rank capacity (moe_expert_rank_capacity_factor), which PTD models as static
//    expert inputs (pad_to_capacity). The deprecated external_cuda_graph = True (the partial-graph
//    dev recipes) is Transformer Engine's impl, as Megatron-core converts it;
//  - tp_comm_overlap as CommOverlapConfig states it (Megatron-Bridge turns it off without TP > 1
//    and sequence parallelism, and so does PTD);
//  - fp8: bf16 → none, fp8_cs → current, fp8_mx → mxfp8, fp8_ds → delayed. The recipes in
//    precisions PTD does not model — fp8_sc (blockwise scaling) and nvfp4 — are not listed.
//  - split: Qwen3-235B-A22B's recipes start from qwen3_235b_a22b_pretrain_config
//    (recipes/qwen/h100/qwen3_moe.py), which counts the embedding and the loss as a layer each;
//    the B200 / GB200 DeepSeek-V3 recipes call set_deepseek_v3_pipeline_model_parallel_layout
//    without a layout (its map by pp, vpp); the H100 ones and the partial-graph dev recipe pass
//    their own layout string (perf_recipe_layout);
//  - recompute: recompute_granularity and recompute_modules ("selective" with modules None
//    is Megatron-core's ["core_attn"]; granularity None is no recompute whatever the modules).
// Not stated here, since it is a layout choice a job writes itself: sequence parallelism.
#include "ptd/spec/stack_defaults.h"

#include <iterator>
#include <string_view>

namespace ptd {

namespace {

// name, model, gpu, gpus, fp8, tp, pp, vpp, cp, ep, etp, mbs, gbs, seq,
// dispatcher, a2a_overlap, shared_expert_overlap, graphs, graph_scope, pad_to_capacity,
// tp_comm_overlap, router_fusion, permute_fusion, fp8_param_gather, split, file (under perf_recipes/),
// recompute, recompute_modules (the DeepSeek-V3 recipes: selective after _deepseek_v3_common, with
// their own modules; every Qwen3 recipe resets its base's full recompute to none, but the 235B
// H100 hybridep dev one, which turns selective on again)
constexpr PerfRecipe kPerfRecipes[] = {
    {"deepseek_v3_pretrain_64gpu_h100_bf16", "deepseek-v3", "h100-sxm", 64, Fp8Recipe::none, 2, 8, 4, 1, 64, 1, 1, 1024, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, false, RecipeSplit::layout_string,
     "deepseek/h100/deepseek_v3.py:163", Recompute::selective, kRecomputeMlaUpProj | kRecomputeMlp},
    {"deepseek_v3_pretrain_64gpu_h100_fp8cs", "deepseek-v3", "h100-sxm", 64, Fp8Recipe::current, 2, 8, 4, 1, 64, 1, 1, 1024, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, true, RecipeSplit::layout_string,
     "deepseek/h100/deepseek_v3.py:192", Recompute::selective, kRecomputeMlaUpProj | kRecomputeMlp},
    {"deepseek_v3_pretrain_1024gpu_h100_bf16", "deepseek-v3", "h100-sxm", 1024, Fp8Recipe::none, 2, 8, 4, 1, 64, 1, 1, 16384, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, false, RecipeSplit::layout_string,
     "deepseek/h100/deepseek_v3.py:28", Recompute::selective, kRecomputeMlaUpProj | kRecomputeMlp},
    {"deepseek_v3_pretrain_1024gpu_h100_fp8cs", "deepseek-v3", "h100-sxm", 1024, Fp8Recipe::current, 2, 8, 4, 1, 64, 1, 1, 16384, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, true, RecipeSplit::layout_string,
     "deepseek/h100/deepseek_v3.py:77", Recompute::selective, kRecomputeMlaUpProj | kRecomputeMlp},
    {"deepseek_v3_pretrain_256gpu_b200_bf16", "deepseek-v3", "b200", 256, Fp8Recipe::none, 1, 16, 0, 1, 8, 1, 1, 4096, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, false, RecipeSplit::deepseek_v3_map,
     "deepseek/b200/deepseek_v3.py:28", Recompute::selective, kRecomputeMlaUpProj},
    {"deepseek_v3_pretrain_256gpu_b200_fp8cs", "deepseek-v3", "b200", 256, Fp8Recipe::current, 1, 16, 0, 1, 8, 1, 1, 4096, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, true, RecipeSplit::deepseek_v3_map,
     "deepseek/b200/deepseek_v3.py:76", Recompute::selective, kRecomputeMlaUpProj},
    {"deepseek_v3_pretrain_256gpu_b200_fp8mx", "deepseek-v3", "b200", 256, Fp8Recipe::mxfp8, 1, 8, 2, 1, 32, 1, 1, 4096, 4096,
     MoeDispatcher::deepep, true, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, true, RecipeSplit::deepseek_v3_map,
     "deepseek/b200/deepseek_v3.py:124", Recompute::selective, kRecomputeMlaUpProj | kRecomputeMlp},
    {"deepseek_v3_pretrain_256gpu_b200_fp8mx_large_scale", "deepseek-v3", "b200", 256, Fp8Recipe::mxfp8, 1, 16, 0, 1, 8, 1, 1, 256, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, true, RecipeSplit::deepseek_v3_map,
     "deepseek/b200/deepseek_v3.py:214", Recompute::selective, kRecomputeMlaUpProj},
    {"deepseek_v3_pretrain_256gpu_gb200_bf16", "deepseek-v3", "gb200", 256, Fp8Recipe::none, 1, 4, 4, 1, 64, 1, 1, 4096, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, false, RecipeSplit::deepseek_v3_map,
     "deepseek/gb200/deepseek_v3.py:30", Recompute::selective, kRecomputeMlaUpProj},
    {"deepseek_v3_pretrain_256gpu_gb200_fp8cs", "deepseek-v3", "gb200", 256, Fp8Recipe::current, 1, 4, 4, 1, 64, 1, 1, 4096, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, true, RecipeSplit::deepseek_v3_map,
     "deepseek/gb200/deepseek_v3.py:82", Recompute::selective, kRecomputeMlp},
    {"deepseek_v3_pretrain_256gpu_gb200_fp8mx", "deepseek-v3", "gb200", 256, Fp8Recipe::mxfp8, 1, 4, 4, 1, 64, 1, 1, 4096, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, false, true, true, true, RecipeSplit::deepseek_v3_map,
     "deepseek/gb200/deepseek_v3.py:134", Recompute::selective, kRecomputeMlaUpProj},
    {"deepseek_v3_pretrain_256gpu_gb200_fp8mx_large_scale", "deepseek-v3", "gb200", 256, Fp8Recipe::mxfp8, 1, 4, 4, 1, 64, 1, 1, 256, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, false, true, true, true, RecipeSplit::deepseek_v3_map,
     "deepseek/gb200/deepseek_v3.py:225", Recompute::selective, kRecomputeMlaUpProj},
    {"deepseek_v3_pretrain_256gpu_gb200_fp8mx_partial_cg_dev", "deepseek-v3", "gb200", 256, Fp8Recipe::mxfp8, 1, 4, 2, 1, 64, 1, 1, 8192, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, true, RecipeSplit::layout_string,
     "deepseek/gb200/deepseek_v3.py:259", Recompute::selective, kRecomputeMlaUpProj},
    {"qwen3_30b_a3b_pretrain_16gpu_h100_bf16", "qwen3-30b-a3b", "h100-sxm", 16, Fp8Recipe::none, 1, 1, 0, 1, 16, 1, 1, 1024, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::transformer_engine, kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, false, RecipeSplit::megatron,
     "qwen/h100/qwen3_moe.py:35", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs", "qwen3-30b-a3b", "h100-sxm", 16, Fp8Recipe::current, 1, 1, 0, 1, 16, 1, 1, 1024, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/h100/qwen3_moe.py:68", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_16gpu_h100_fp8ds", "qwen3-30b-a3b", "h100-sxm", 16, Fp8Recipe::delayed, 1, 1, 0, 1, 16, 1, 1, 1024, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/h100/qwen3_moe.py:125", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_32gpu_h100_bf16_dev", "qwen3-30b-a3b", "h100-sxm", 32, Fp8Recipe::none, 1, 1, 0, 1, 8, 1, 1, 256, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, false, RecipeSplit::megatron,
     "qwen/h100/qwen3_moe.py:381", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_64gpu_h100_bf16", "qwen3-30b-a3b", "h100-sxm", 64, Fp8Recipe::none, 1, 1, 0, 1, 16, 1, 1, 4096, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::transformer_engine, kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, false, RecipeSplit::megatron,
     "qwen/h100/qwen3_moe.py:264", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_64gpu_h100_fp8cs", "qwen3-30b-a3b", "h100-sxm", 64, Fp8Recipe::current, 1, 1, 0, 1, 16, 1, 1, 4096, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/h100/qwen3_moe.py:290", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_8gpu_b200_bf16", "qwen3-30b-a3b", "b200", 8, Fp8Recipe::none, 1, 1, 0, 1, 8, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, false, RecipeSplit::megatron,
     "qwen/b200/qwen3_moe.py:177", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_8gpu_b200_fp8cs", "qwen3-30b-a3b", "b200", 8, Fp8Recipe::current, 1, 1, 0, 1, 8, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/b200/qwen3_moe.py:231", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx", "qwen3-30b-a3b", "b200", 8, Fp8Recipe::mxfp8, 1, 1, 0, 1, 8, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/b200/qwen3_moe.py:285", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_64gpu_b200_bf16", "qwen3-30b-a3b", "b200", 64, Fp8Recipe::none, 1, 1, 0, 1, 8, 1, 4, 4096, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, false, RecipeSplit::megatron,
     "qwen/b200/qwen3_moe.py:612", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_64gpu_b200_fp8cs", "qwen3-30b-a3b", "b200", 64, Fp8Recipe::current, 1, 1, 0, 1, 8, 1, 4, 4096, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/b200/qwen3_moe.py:638", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_8gpu_gb200_bf16", "qwen3-30b-a3b", "gb200", 8, Fp8Recipe::none, 1, 1, 0, 1, 8, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, false, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:194", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_8gpu_gb200_fp8cs", "qwen3-30b-a3b", "gb200", 8, Fp8Recipe::current, 1, 1, 0, 1, 8, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:248", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx", "qwen3-30b-a3b", "gb200", 8, Fp8Recipe::mxfp8, 1, 1, 0, 1, 8, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, true, true, true, true, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:302", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_16gpu_gb200_bf16_dev", "qwen3-30b-a3b", "gb200", 16, Fp8Recipe::none, 1, 1, 0, 1, 16, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::none, 0, false, false, true, true, false, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:739", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_16gpu_gb200_fp8mx_paged_stash_dev", "qwen3-30b-a3b", "gb200", 16, Fp8Recipe::mxfp8, 1, 1, 0, 1, 16, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::local, kGraphFullIteration, true, false, true, true, false, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:857", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_16gpu_gb200_fp8mx_partial_cg_dev", "qwen3-30b-a3b", "gb200", 16, Fp8Recipe::mxfp8, 1, 1, 0, 1, 16, 1, 4, 512, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, false, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:795", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_32gpu_gb200_bf16", "qwen3-30b-a3b", "gb200", 32, Fp8Recipe::none, 1, 1, 0, 1, 8, 1, 4, 2048, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, false, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:631", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_30b_a3b_pretrain_32gpu_gb200_fp8cs", "qwen3-30b-a3b", "gb200", 32, Fp8Recipe::current, 1, 1, 0, 1, 8, 1, 4, 2048, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::megatron,
     "qwen/gb200/qwen3_moe.py:657", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_h100_bf16", "qwen3-235b-a22b", "h100-sxm", 256, Fp8Recipe::none, 2, 8, 4, 1, 32, 1, 1, 8192, 4096,
     MoeDispatcher::alltoall, true, false, CudaGraphImpl::none, 0, false, false, true, true, false, RecipeSplit::embedding_and_loss,
     "qwen/h100/qwen3_moe.py:136", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_h100_bf16_hybridep_dev", "qwen3-235b-a22b", "h100-sxm", 256, Fp8Recipe::none, 2, 8, 3, 1, 32, 1, 1, 2048, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::transformer_engine, kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, false, RecipeSplit::embedding_and_loss,
     "qwen/h100/qwen3_moe.py:494", Recompute::selective, kRecomputeMoeAct | kRecomputeLayernorm},
    {"qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs", "qwen3-235b-a22b", "h100-sxm", 256, Fp8Recipe::current, 2, 8, 4, 1, 32, 1, 1, 8192, 4096,
     MoeDispatcher::alltoall, true, false, CudaGraphImpl::none, 0, false, false, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/h100/qwen3_moe.py:189", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_large_scale", "qwen3-235b-a22b", "h100-sxm", 256, Fp8Recipe::current, 2, 8, 4, 1, 32, 1, 1, 512, 4096,
     MoeDispatcher::alltoall, true, false, CudaGraphImpl::none, 0, false, false, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/h100/qwen3_moe.py:242", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_64gpu_b200_bf16", "qwen3-235b-a22b", "b200", 64, Fp8Recipe::none, 1, 8, 4, 1, 8, 1, 1, 2048, 4096,
     MoeDispatcher::alltoall, false, false, CudaGraphImpl::none, 0, false, true, true, true, false, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:35", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_64gpu_b200_fp8cs", "qwen3-235b-a22b", "b200", 64, Fp8Recipe::current, 1, 8, 0, 1, 8, 1, 1, 2048, 4096,
     MoeDispatcher::alltoall, false, false, CudaGraphImpl::none, 0, false, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:83", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_64gpu_b200_fp8mx", "qwen3-235b-a22b", "b200", 64, Fp8Recipe::mxfp8, 1, 8, 0, 1, 8, 1, 1, 2048, 4096,
     MoeDispatcher::alltoall, false, false, CudaGraphImpl::none, 0, false, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:130", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_128gpu_b200_fp8mx_deepep_dev", "qwen3-235b-a22b", "b200", 128, Fp8Recipe::mxfp8, 2, 4, 2, 1, 16, 1, 3, 3072, 4096,
     MoeDispatcher::deepep, true, false, CudaGraphImpl::none, 0, false, false, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:707", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_b200_bf16", "qwen3-235b-a22b", "b200", 256, Fp8Recipe::none, 1, 8, 4, 1, 8, 1, 1, 8192, 4096,
     MoeDispatcher::alltoall, false, false, CudaGraphImpl::none, 0, false, true, true, true, false, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:356", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_b200_fp8cs", "qwen3-235b-a22b", "b200", 256, Fp8Recipe::current, 1, 8, 0, 1, 8, 1, 1, 8192, 4096,
     MoeDispatcher::alltoall, false, false, CudaGraphImpl::none, 0, false, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:404", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_b200_fp8mx", "qwen3-235b-a22b", "b200", 256, Fp8Recipe::mxfp8, 1, 8, 3, 1, 8, 1, 1, 8192, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:451", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_b200_fp8mx_large_scale", "qwen3-235b-a22b", "b200", 256, Fp8Recipe::mxfp8, 1, 8, 3, 1, 8, 1, 1, 512, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/b200/qwen3_moe.py:506", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_64gpu_gb200_bf16", "qwen3-235b-a22b", "gb200", 64, Fp8Recipe::none, 1, 8, 0, 1, 8, 1, 1, 2048, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, false, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:34", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_64gpu_gb200_fp8cs", "qwen3-235b-a22b", "gb200", 64, Fp8Recipe::current, 1, 8, 0, 1, 32, 1, 1, 2048, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:88", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_64gpu_gb200_fp8mx", "qwen3-235b-a22b", "gb200", 64, Fp8Recipe::mxfp8, 1, 8, 3, 1, 32, 1, 1, 2048, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:142", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_128gpu_gb200_fp8mx_paged_stash_dev", "qwen3-235b-a22b", "gb200", 128, Fp8Recipe::mxfp8, 1, 1, 0, 1, 64, 1, 1, 8192, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, false, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:929", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_128gpu_gb200_fp8mx_partial_cg_dev", "qwen3-235b-a22b", "gb200", 128, Fp8Recipe::mxfp8, 1, 1, 0, 1, 64, 1, 1, 8192, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, false, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:1010", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_gb200_bf16", "qwen3-235b-a22b", "gb200", 256, Fp8Recipe::none, 1, 8, 0, 1, 8, 1, 1, 8192, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, false, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:354", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs", "qwen3-235b-a22b", "gb200", 256, Fp8Recipe::current, 1, 8, 0, 1, 32, 1, 1, 8192, 4096,
     MoeDispatcher::hybridep, false, false, CudaGraphImpl::transformer_engine, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess, false, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:408", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx", "qwen3-235b-a22b", "gb200", 256, Fp8Recipe::mxfp8, 1, 8, 3, 1, 32, 1, 1, 8192, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:462", Recompute::none, kRecomputeCoreAttn},
    {"qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_large_scale", "qwen3-235b-a22b", "gb200", 256, Fp8Recipe::mxfp8, 1, 8, 3, 1, 32, 1, 1, 512, 4096,
     MoeDispatcher::hybridep, true, false, CudaGraphImpl::local, kGraphFullIteration, true, true, true, true, true, RecipeSplit::embedding_and_loss,
     "qwen/gb200/qwen3_moe.py:514", Recompute::none, kRecomputeCoreAttn},
};

}  // namespace

std::span<const PerfRecipe> perf_recipes() { return {kPerfRecipes, std::size(kPerfRecipes)}; }

// The layout strings the RecipeSplit::layout_string recipes pass to
// set_deepseek_v3_pipeline_model_parallel_layout (the lines named in their file field). The
// GB200 dev recipe's string has 16 chunks while the recipe sets pp 4 × vpp 2 (Megatron-core's
// TransformerConfig refuses that pair: the string decides vpp 4).
const char* perf_recipe_layout(const PerfRecipe& r) {
    static constexpr struct {
        const char* recipe;
        const char* layout;
    } kLayouts[] = {
        {"deepseek_v3_pretrain_1024gpu_h100_bf16", "Et|(tt|)*30mL"},
        {"deepseek_v3_pretrain_1024gpu_h100_fp8cs", "Et|(tt|)*30mL"},
        {"deepseek_v3_pretrain_64gpu_h100_bf16", "Et|(tt|)*30mL"},  // the 1024-GPU recipe's, GBS 1024
        {"deepseek_v3_pretrain_64gpu_h100_fp8cs", "Et|(tt|)*30mL"},
        {"deepseek_v3_pretrain_256gpu_gb200_fp8mx_partial_cg_dev", "Et*4|(tttt|)*14tmL"},
    };
    if (r.split != RecipeSplit::layout_string) return nullptr;
    for (const auto& l : kLayouts)
        if (std::string_view(l.recipe) == r.name) return l.layout;
    return nullptr;
}

}  // namespace ptd
