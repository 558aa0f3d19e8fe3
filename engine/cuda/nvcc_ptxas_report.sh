#!/bin/sh
# nvcc_ptxas_report.sh — the compiler launcher of ptd_cuda_dev (engine/cuda/CMakeLists.txt):
# runs the compile it is given and keeps ptxas's resource report (kernels_cuda.cu is compiled
# with --ptxas-options=-v) in REPORT, for the cuda_kernel_resources test
# (tests/cuda_resources.cmake), so the test reads the shipped build's kernels instead of
# compiling them again. The report's lines leave the compiler's output; every other line
# passes through, and the compile's exit status is the launcher's.
#   nvcc_ptxas_report.sh REPORT nvcc ARGS...
report="$1"
shift
mkdir -p "$(dirname "$report")" || exit 1
err="$report.$$.stderr"
"$@" 2>"$err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^ptxas info' "$err"; then
  grep -E '^ptxas info|bytes stack frame' "$err" >"$report.$$" && mv "$report.$$" "$report"
fi
grep -vE '^ptxas info|bytes stack frame' "$err" >&2
rm -f "$err"
exit "$rc"
