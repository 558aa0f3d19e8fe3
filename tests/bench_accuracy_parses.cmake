# bench_accuracy_parses — runs bench_accuracy on the real bench/accuracy/published_runs.toml and
# checks that it exits 0 and prints the per-generation summary (no error thresholds: the figures
# are bench results, not assertions), then feeds it broken run files and checks each is refused
# with exit 2 and a message naming the file, the line and the key.
#   cmake -DBENCH=<bench_accuracy> -DWORK_DIR=<scratch dir> -P bench_accuracy_parses.cmake
execute_process(COMMAND ${BENCH} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_accuracy exited ${rc}:\n${err}")
endif()
# issue 29's method: the breakdown by size band, scale band and feature (each with its signed
# median), every band present in the checking set.
foreach(expected "summary by generation" "summary by source" "summary by framework"
                 "\nA100 +calibrate" "\nA100 +check" "\nH100 +calibrate" "\nH100 +check"
                 "summary by size band" "summary by scale band" "summary by feature\n" "summary by feature and stack"
                 "median +signed +worst" "\n<5B +check" "\n5-30B +check" "\n30-100B +check" "\n>=100B +check"
                 "\n<=64 +check" "\n65-512 +check" "\n513-4096 +check" "\n>4096 +check"
                 "\nfp8 +check" "\nmoe +check" "\ncontext-parallel +check" "\nrecompute-full:megatron +check"
                 "summary by moe shape" "measured memory")
  if(NOT out MATCHES "${expected}")
    message(FATAL_ERROR "bench_accuracy output lacks \"${expected}\":\n${out}")
  endif()
endforeach()

# The MoE rows by shape: each MoE run in one group per property that sets its MoE cost (local
# experts, EP size, top-k, dispatcher, CUDA graphs, experts' dtype, GPU); dense runs in none, so
# no A100 group (the published MoE rows are H100 and Blackwell runs) and no top-k 1.
string(REGEX MATCH "summary by moe shape\n[^\n]*\n([^\n]+\n)+" moe_shape "${out}")
foreach(expected "\nlocal experts 1-4 +check" "\nlocal experts 9\\+ +check" "\nep 64\\+ +check" "\ntop-k 8 +check"
                 "\ndispatcher hybridep +check" "\ngraphs full-iteration +check" "\ngraphs none +check"
                 "\nexperts fp8 +check" "\nexperts 16-bit +check" "\ngpu H100 +check")
  if(NOT moe_shape MATCHES "${expected}")
    message(FATAL_ERROR "bench_accuracy's summary by moe shape lacks \"${expected}\":\n${moe_shape}")
  endif()
endforeach()
if(moe_shape MATCHES "gpu A100" OR moe_shape MATCHES "top-k 1 ")
  message(FATAL_ERROR "bench_accuracy's summary by moe shape counts a dense run:\n${moe_shape}")
endif()

# ttmem: bench_accuracy reads FSDP with pp > 1 as bench_memory does (run_file.h
# apply_fsdp_layout), so no measured-memory row is refused for its ZeRO stage.
if(out MATCHES "max_reserved[^\n]*skipped: invalid layout: parallel.zero")
  message(FATAL_ERROR "bench_accuracy skips a measured-memory run for its ZeRO stage:\n${out}")
endif()

execute_process(COMMAND ${BENCH} --generation H100 --json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\"by\": \"generation\", \"group\": \"H100\"" OR out MATCHES "\"generation\": \"A100\""
   OR NOT out MATCHES "\"by\": \"size band\", \"group\": \"<5B\"" OR NOT out MATCHES "\"by\": \"feature and stack\"" OR NOT out MATCHES "\"by\": \"moe shape\", \"group\": \"gpu H100\""
   OR NOT out MATCHES "\"median_signed_error\": ")
  message(FATAL_ERROR "bench_accuracy --generation H100 --json: exit ${rc}, output:\n${out}\n${err}")
endif()

# lean: --csv prints one header line and one line per modelled run, with the signed error and
# the step's terms; combined with --generation it keeps only that generation's runs.
execute_process(COMMAND ${BENCH} --generation H100 --csv RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^name,source_tag,framework,generation,use,gpus,"
   OR NOT out MATCHES ",published_s,predicted_s,error,compute_s,tp_s,cp_s,ep_s,pp_s,bubble_s,dp_s,optimizer_s,"
   OR NOT out MATCHES "\nllama3-t4-405b-8k-8192gpu,llama3,other,H100,calibrate,8192,"
   OR NOT out MATCHES ",mfu,size_band,scale_band,features\n"
   OR NOT out MATCHES "\nllama3-t4-405b-8k-8192gpu,[^\n]*,>=100B,>4096,interleaved-pp\\+sequence-parallel\\+gqa\n"
   OR out MATCHES ",A100," OR out MATCHES "summary by")
  message(FATAL_ERROR "bench_accuracy --generation H100 --csv: exit ${rc}, output:\n${out}\n${err}")
endif()
string(REGEX MATCHALL "\n" csv_lines "${out}")
list(LENGTH csv_lines csv_count)
if(csv_count LESS 90)
  message(FATAL_ERROR "bench_accuracy --generation H100 --csv printed ${csv_count} lines, expected the header and every H100 run")
endif()

# mbrecipe: --leave-out reads the runs without those keys. The 26.08 Qwen3-30B-A3B GB200 row
# without its recipe's name and MoE keys is still that recipe's run (its model's shape, GPUs,
# precision, layout and batch): it takes the recipe's settings unnamed and stays at its -7.6%
# (with the plain defaults it would be +82%). A key that is not a stack detail is refused
# naming what is allowed.
execute_process(COMMAND ${BENCH} --leave-out recipe,moe_dispatcher,moe_a2a_overlap,cuda_graph_impl,cuda_graph_scope,moe_pad_to_capacity --csv
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\nmbridge2608-qwen3-30b-a3b-gb200-mxfp8,[^\n]*,-0\\.0[0-9]*,[0-9.e+-]+,")
  message(FATAL_ERROR "bench_accuracy --leave-out recipe,...: exit ${rc}, expected mbridge2608-qwen3-30b-a3b-gb200-mxfp8 within 10% (its recipe matched unnamed):\n${out}\n${err}")
endif()
execute_process(COMMAND ${BENCH} --leave-out recipe,tp RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--leave-out \"recipe,tp\": \"tp\" is not a stack-detail run key; allowed: flash_attention, ")
  message(FATAL_ERROR "bench_accuracy --leave-out recipe,tp: exit ${rc}, expected 2 and the allowed keys:\n${out}\n${err}")
endif()

# Bad input: each case is a run file, and what the refusal must say.
file(MAKE_DIRECTORY ${WORK_DIR})
set(base "[[run]]\nname = \"x-1\"\ngpu = \"h100-sxm\"\ngpus = 8\nlayers = 2\nhidden = 256\nheads = 4\nglobal_batch = 8\ndp = 8\niteration_s = 1.0\n")
set(case_names unknown_key bad_fp8 bad_framework fsdp_zero memory_kind bad_recipe)
set(case_bad_recipe "${base}framework = \"nemo\"\nrecipe = \"qwen3_30b_a3b_pretrain_4gpu_b200_fp8mx\"\n")
set(want_bad_recipe ":12: run key \"recipe\" is \"qwen3_30b_a3b_pretrain_4gpu_b200_fp8mx\"; allowed: \"nemotron/nemotron_340b\"")
set(case_unknown_key "${base}flash_attn = true\n")
set(want_unknown_key ":11: unknown run key \"flash_attn\"")
set(case_bad_fp8 "${base}fp8 = \"e4m3\"\n")
set(want_bad_fp8 ":11: run key \"fp8\" is \"e4m3\"; allowed: none, delayed, current, tensorwise, rowwise, mxfp8")
set(case_bad_framework "${base}framework = \"megatron-lm\"\n")
set(want_bad_framework ":11: run key \"framework\" is \"megatron-lm\"")
set(case_fsdp_zero "${base}fsdp = true\nzero = 1\n")
set(want_fsdp_zero ":12: run key \"zero\" is 1 with fsdp = true; allowed: 3, or leave it out")
set(case_memory_kind "${base}memory_gib_measured = 40.0\n")
set(want_memory_kind "memory_gib_measured and memory_kind go together")
# oom4: the optimizer-state dtype keys take their own words
list(APPEND case_names bad_state_dtype)
set(case_bad_state_dtype "${base}main_params_dtype = \"fp8\"\n")
set(want_bad_state_dtype ":11: run key \"main_params_dtype\" is \"fp8\"; allowed: fp32, bf16, fp16, none, fp32-remainders")
# moe: the MoE keys are checked where they are read
list(APPEND case_names bad_top_k top_k_dense ep_dense)
set(case_bad_top_k "${base}experts = 8\ntop_k = 9\n")
set(want_bad_top_k ":12: run key \"top_k\" is 9 with experts = 8; allowed: 1 .. experts")
set(case_top_k_dense "${base}top_k = 2\n")
set(want_top_k_dense ":11: run key \"top_k\" without \"experts\"")
set(case_ep_dense "${base}ep = 2\n")
set(want_ep_dense ":11: run key \"ep\" is 2 for a dense model; allowed: 1 unless experts >= 2")
# mlarows: the shape keys of recent open models, expert_tp and an explicit pipeline split
list(APPEND case_names neg_head_dim moe_ffn_dense first_dense_all mla_no_rope mla_rank_alone mla_kv_heads
                       expert_tp_zero expert_tp_dense split_negative split_not_array)
set(case_neg_head_dim "${base}head_dim = -64\n")
set(want_neg_head_dim ":11: run key \"head_dim\" is -64; allowed: 0 (not used) or more")
set(case_moe_ffn_dense "${base}moe_ffn_hidden = 512\n")
set(want_moe_ffn_dense ":11: run key \"moe_ffn_hidden\" for a dense model; allowed: 0 unless experts >= 2")
set(case_first_dense_all "${base}experts = 4\ntop_k = 2\nfirst_dense_layers = 2\n")
set(want_first_dense_all ":13: run key \"first_dense_layers\" is 2 with 2 layers; allowed: 0 .. layers - 1")
set(case_mla_no_rope "${base}kv_lora_rank = 64\nv_head_dim = 64\n")
set(want_mla_no_rope ":11: run key \"kv_lora_rank\" without \"qk_rope_head_dim\"")
set(case_mla_rank_alone "${base}q_lora_rank = 128\n")
set(want_mla_rank_alone ":11: run key \"q_lora_rank\" without \"kv_lora_rank\"; allowed: 0, or kv_lora_rank > 0 (MLA)")
set(case_mla_kv_heads "${base}kv_heads = 2\nkv_lora_rank = 64\nqk_rope_head_dim = 32\nv_head_dim = 64\n")
set(want_mla_kv_heads ":11: run key \"kv_heads\" is 2 with kv_lora_rank (MLA); allowed: heads (4)")
set(case_expert_tp_zero "${base}experts = 4\ntop_k = 2\nexpert_tp = 0\n")
set(want_expert_tp_zero ":13: run key \"expert_tp\" is 0; allowed: 1 or more")
set(case_expert_tp_dense "${base}expert_tp = 1\n")
set(want_expert_tp_dense ":11: run key \"expert_tp\" for a dense model")
set(case_split_negative "${base}pp = 2\nlayers_per_stage = [3, -1]\n")
set(want_split_negative ":12: run key \"layers_per_stage\" has an entry that is not an integer 0 .. 100000")
set(case_split_not_array "${base}pp = 2\nlayers_per_stage = 2\n")
set(want_split_not_array ":12: run key \"layers_per_stage\" must be a non-empty array of integers")
# hostov: CUDA graphs and static expert inputs
list(APPEND case_names graph_scope_word graph_impl_word)
set(case_graph_scope_word "${base}experts = 4\ntop_k = 2\ncuda_graph_impl = \"local\"\ncuda_graph_scope = [\"layer\"]\n")
set(want_graph_scope_word ":14: run key \"cuda_graph_scope\" has \"layer\"; allowed: full_iteration, attn, mlp, moe, moe_router, moe_preprocess")
set(case_graph_impl_word "${base}cuda_graph_impl = \"te\"\n")
set(want_graph_impl_word ":11: run key \"cuda_graph_impl\" is \"te\"; allowed: none, local, transformer_engine")
foreach(name IN LISTS case_names)
  set(file ${WORK_DIR}/${name}.toml)
  file(WRITE ${file} "${case_${name}}")
  execute_process(COMMAND ${BENCH} ${file} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${file}" at_file)
  string(FIND "${err}" "${want_${name}}" at_want)
  if(NOT rc EQUAL 2 OR at_file EQUAL -1 OR at_want EQUAL -1)
    message(FATAL_ERROR "case ${name}: want exit 2 and \"${file}...${want_${name}}\", got exit ${rc}:\n${err}${out}")
  endif()
endforeach()

# mlperf31: --line PREFIX fits step = a x micro-batches + b to the runs named PREFIX..., published
# and predicted, and lists them; a prefix whose runs do not span two micro-batch counts is
# refused with exit 2, naming how many runs and counts it found.
execute_process(COMMAND ${BENCH} --line mlperf31-gpt3-175b RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "over the 8 runs named mlperf31-gpt3-175b\\*, least squares"
   OR NOT out MATCHES "\npublished +[0-9.]+ ms +[0-9.]+ s +[0-9.]+ ms\npredicted +[0-9.]+ ms +[0-9.]+ s +[0-9.]+ ms\n"
   OR NOT out MATCHES "\nmlperf31-gpt3-175b-10752gpu +8 +0\\.930 ")
  message(FATAL_ERROR "bench_accuracy --line mlperf31-gpt3-175b: exit ${rc}, output:\n${out}\n${err}")
endif()
execute_process(COMMAND ${BENCH} --line mlperf31-gpt3-175b-512 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--line \"mlperf31-gpt3-175b-512\": 1 modelled run\\(s\\) start with it, over 1 micro-batch count\\(s\\)")
  message(FATAL_ERROR "bench_accuracy --line with one run: exit ${rc}, expected 2 and a message:\n${out}\n${err}")
endif()
execute_process(COMMAND ${BENCH} --line "" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--line \"\": the prefix is empty")
  message(FATAL_ERROR "bench_accuracy --line \"\": exit ${rc}, expected 2 and a message:\n${out}\n${err}")
endif()
execute_process(COMMAND ${BENCH} --line mlperf31 --csv RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--line prints its own table; it does not combine with --json, --csv")
  message(FATAL_ERROR "bench_accuracy --line with --csv: exit ${rc}, expected 2 and a message:\n${out}\n${err}")
endif()
