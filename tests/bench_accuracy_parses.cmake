# bench_accuracy_parses — runs bench_accuracy on the real bench/accuracy/published_runs.toml and
# checks that it exits 0 and prints the per-generation summary (no error thresholds: the figures
# are bench results, not assertions), then feeds it broken run files and checks each is refused
# with exit 2 and a message naming the file, the line and the key.
#   cmake -DBENCH=<bench_accuracy> -DWORK_DIR=<scratch dir> -P bench_accuracy_parses.cmake
execute_process(COMMAND ${BENCH} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_accuracy exited ${rc}:\n${err}")
endif()
foreach(expected "summary by generation" "summary by source" "summary by framework"
                 "\nA100 +calibrate" "\nA100 +check" "\nH100 +calibrate" "\nH100 +check"
                 "measured memory")
  if(NOT out MATCHES "${expected}")
    message(FATAL_ERROR "bench_accuracy output lacks \"${expected}\":\n${out}")
  endif()
endforeach()

# ttmem: bench_accuracy reads FSDP with pp > 1 as bench_memory does (run_file.h
# apply_fsdp_layout), so no measured-memory row is refused for its ZeRO stage.
if(out MATCHES "max_reserved[^\n]*skipped: invalid layout: parallel.zero")
  message(FATAL_ERROR "bench_accuracy skips a measured-memory run for its ZeRO stage:\n${out}")
endif()

execute_process(COMMAND ${BENCH} --generation H100 --json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\"by\": \"generation\", \"group\": \"H100\"" OR out MATCHES "\"generation\": \"A100\"")
  message(FATAL_ERROR "bench_accuracy --generation H100 --json: exit ${rc}, output:\n${out}\n${err}")
endif()

# Bad input: each case is a run file, and what the refusal must say.
file(MAKE_DIRECTORY ${WORK_DIR})
set(base "[[run]]\nname = \"x-1\"\ngpu = \"h100-sxm\"\ngpus = 8\nlayers = 2\nhidden = 256\nheads = 4\nglobal_batch = 8\ndp = 8\niteration_s = 1.0\n")
set(case_names unknown_key bad_fp8 bad_framework fsdp_zero memory_kind)
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
