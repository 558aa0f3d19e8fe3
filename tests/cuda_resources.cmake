# cuda_resources.cmake — the resource check of the CUDA kernels (issue 14, item 5): the one
# view of the real device code we have without a GPU. Reads ptxas's -v report of the device
# build of the kernels (engine/cuda/kernels_cuda.cu, compiled by the build for every
# architecture with --ptxas-options=-v; engine/cuda/nvcc_ptxas_report.sh keeps the report),
# prints each kernel's registers / stack frame / spills per architecture, and fails naming
# the kernel when a hot kernel spills registers or has a local-memory stack frame (both mean
# local-memory traffic in a memory-bound kernel). Cold kernels (run once at start-up) may
# use the stack: COLD is a regex of their demangled names. Every architecture in ARCHS (the
# build's CMAKE_CUDA_ARCHITECTURES) must appear in the report.
#
# With -DLAUNCH_SHAPES=file (written by test_cublaslt_standin's EngineLaunchShapes test: every
# launch the engine makes at every asset job's and GPT-2's shapes, run by the simulator in
# shapes-only mode, as "<kernel at the launch site> <max threads> <max dynamic smem> <count>")
# it also checks that each kernel's registers fit its largest block: registers are allocated
# per warp in units of 256 (regs/thread rounded up to 8, × 32), and a block may hold at most
# 65536 (sm_80, sm_90: "Maximum number of 32-bit registers per thread block", CUDA C++
# Programming Guide, Technical Specifications per Compute Capability). A launch site that
# names a variable (`kernel`) cannot be matched to a kernel, so kernels not found by name are
# held against the largest block of any launch.
#
# Run by ctest (tests/CMakeLists.txt, only with ENABLE_CUDA):
#   cmake -DREPORT=build/engine/cuda/kernels_cuda.ptxas.txt -DARCHS=80,90 -DCOLD=regex
#         [-DLAUNCH_SHAPES=file] -P cuda_resources.cmake
# (lists are comma-separated: a ';' would be split by add_test before it gets here)
cmake_minimum_required(VERSION 3.25)

foreach(var REPORT ARCHS)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "cuda_resources.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${REPORT}")
  message(FATAL_ERROR "${REPORT} does not exist: the build writes it when it compiles engine/cuda/kernels_cuda.cu "
                      "(engine/cuda/nvcc_ptxas_report.sh); rebuild ptd_cuda_dev")
endif()
find_program(CXXFILT c++filt)
string(REPLACE "," ";" ARCHS "${ARCHS}")

set(failures)
set(kernel_count 0)
set(shape_names)
set(any_max_threads 0)
if(DEFINED LAUNCH_SHAPES AND NOT "${LAUNCH_SHAPES}" STREQUAL "")
  if(NOT EXISTS "${LAUNCH_SHAPES}")
    message(FATAL_ERROR "LAUNCH_SHAPES=${LAUNCH_SHAPES} does not exist: run the EngineLaunchShapes test first")
  endif()
  file(STRINGS "${LAUNCH_SHAPES}" shape_lines)
  foreach(l IN LISTS shape_lines)
    if(l MATCHES "^([^ ]+) ([0-9]+) ([0-9]+) ([0-9]+)$")
      set(site "${CMAKE_MATCH_1}")
      set(threads ${CMAKE_MATCH_2})
      # The kernel's own name: the last identifier before a template or call, past namespaces.
      string(REGEX REPLACE "[()]" "" site "${site}")
      string(REGEX REPLACE "<.*$" "" site "${site}")
      string(REGEX REPLACE "^.*::" "" site "${site}")
      list(APPEND shape_names "${site}")
      if(NOT DEFINED "threads_${site}" OR threads GREATER "${threads_${site}}")
        set("threads_${site}" ${threads})
      endif()
      if(threads GREATER any_max_threads)
        set(any_max_threads ${threads})
      endif()
    endif()
  endforeach()
  if(any_max_threads EQUAL 0)
    message(FATAL_ERROR "no launch in ${LAUNCH_SHAPES}")
  endif()
endif()
set(register_checks 0)
file(STRINGS "${REPORT}" lines)
set(arch "")
set(seen_archs)
# ptxas prints, per entry function and architecture:
#   Compiling entry function '<mangled>' for 'sm_90'
#   Function properties for <mangled>
#       <F> bytes stack frame, <S> bytes spill stores, <L> bytes spill loads
#   Used <R> registers, used <B> barriers[, <N> bytes cumulative stack size][, ...]
set(entry "")
set(frame 0)
set(spill_st 0)
set(spill_ld 0)
foreach(line IN LISTS lines)
  if(line MATCHES "Compiling entry function '([^']+)' for 'sm_([0-9a-z]+)'")
    set(entry "${CMAKE_MATCH_1}")
    set(arch "${CMAKE_MATCH_2}")
    list(APPEND seen_archs "${arch}")
    set(frame 0)
    set(spill_st 0)
    set(spill_ld 0)
  elseif(entry AND line MATCHES "([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads")
    set(frame ${CMAKE_MATCH_1})
    set(spill_st ${CMAKE_MATCH_2})
    set(spill_ld ${CMAKE_MATCH_3})
  elseif(entry AND line MATCHES "Used ([0-9]+) registers")
    set(regs ${CMAKE_MATCH_1})
    if(line MATCHES "([0-9]+) bytes cumulative stack size" AND CMAKE_MATCH_1 GREATER frame)
      set(frame ${CMAKE_MATCH_1})  # the kernel's own frame plus what its callees use
    endif()
    set(name "${entry}")
    if(CXXFILT)
      execute_process(COMMAND "${CXXFILT}" "${entry}" OUTPUT_VARIABLE name OUTPUT_STRIP_TRAILING_WHITESPACE)
    endif()
    math(EXPR kernel_count "${kernel_count} + 1")
    set(cold FALSE)
    if(COLD AND name MATCHES "${COLD}")
      set(cold TRUE)
    endif()
    set(tag "")
    if(cold)
      set(tag " (cold)")
    endif()
    message("sm_${arch} ${regs} registers, ${frame} B stack, ${spill_st}/${spill_ld} B spill st/ld${tag}: ${name}")
    if(any_max_threads GREATER 0)
      set(base "${name}")
      string(REGEX REPLACE "\\(.*$" "" base "${base}")
      string(REGEX REPLACE "<.*$" "" base "${base}")
      string(REGEX REPLACE "^.*[: ]" "" base "${base}")
      if(DEFINED "threads_${base}")
        set(block "${threads_${base}}")
        set(why "its largest launch")
      else()
        set(block ${any_max_threads})
        set(why "the largest block of any launch (no launch site names it)")
      endif()
      math(EXPR per_warp "((${regs} + 7) / 8 * 8 * 32 + 255) / 256 * 256")
      math(EXPR warps "(${block} + 31) / 32")
      math(EXPR need "${per_warp} * ${warps}")
      math(EXPR register_checks "${register_checks} + 1")
      if(need GREATER 65536)
        list(APPEND failures
             "sm_${arch}: ${name}: ${regs} registers × ${block} threads (${why}) = ${need} > 65536 registers per block")
      endif()
    endif()
    if(NOT cold AND (frame GREATER 0 OR spill_st GREATER 0 OR spill_ld GREATER 0))
      list(APPEND failures
           "sm_${arch}: ${name}: ${frame} bytes stack frame, ${spill_st} bytes spill stores, ${spill_ld} bytes spill loads")
    endif()
    set(entry "")
  endif()
endforeach()

foreach(want IN LISTS ARCHS)
  string(REGEX REPLACE "[^0-9]" "" want "${want}")
  if(NOT want IN_LIST seen_archs)
    list(APPEND failures "sm_${want}: no kernel of this architecture in ${REPORT} (the build's CMAKE_CUDA_ARCHITECTURES)")
  endif()
endforeach()

if(kernel_count EQUAL 0)
  message(FATAL_ERROR "no kernel found in the ptxas report ${REPORT}: did the -Xptxas -v output format change?")
endif()
if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "hot kernels with local-memory traffic (a stack frame or register spills):\n  ${text}")
endif()
if(any_max_threads GREATER 0)
  message("resource check passed: ${kernel_count} kernel builds, no spills or stack frames in hot kernels; "
          "${register_checks} register checks against the engine's launch shapes (largest block ${any_max_threads})")
else()
  message("resource check passed: ${kernel_count} kernel builds, no spills or stack frames in hot kernels")
endif()
