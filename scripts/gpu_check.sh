#!/usr/bin/env bash
# gpu_check.sh OUT_DIR — every open question about ptd-engine on a GPU, answered in one short
# run the day a device is at hand (issue 30, point 7). Writes each step's output as text
# under OUT_DIR and a summary (OUT_DIR/summary.txt: step, exit status, seconds, what it
# means). On a machine without a usable GPU it says so in the summary and still runs the
# CPU-side parts (the cuBLASLt stand-in, the simulator, the CPU losses), so the script itself
# is exercised everywhere. Assumes a configured and built tree (scripts/setup.sh, cmake
# --build build); PTD_BUILD_DIR picks another. Budget: PTD_GPU_CHECK_BUDGET_S (default 480
# s) for the whole run; each step gets at most what is left, and a step that would start
# with less than 20 s left is recorded as "skipped: time budget".
#
# Steps (docs/engine.md, "The first GPU run"):
#   env            versions: commit, nvcc, driver (nvidia-smi), CUDA runtime the build uses
#   nvidia-smi     the devices, or "no GPU"
#   standin        the cuBLASLt stand-in test (CPU): every GEMM the model makes
#   sim_losses     tiny-gpt bf16, 5 steps: --backend cpu and --backend cuda-sim (CPU)
#   ctest_gpu      ctest -L gpu (fails, not skips, when nvidia-smi sees a GPU CUDA cannot use)
#   e2e_1gpu       the same tiny job with --backend cuda; losses compared with the CPU's
#   sanitizer_*    compute-sanitizer memcheck, racecheck, synccheck on 2 steps of the tiny job
#   bench          bench_engine --backend cuda: GEMM peak, GPT-2 124M/350M/774M tokens/s, MFU
#   nsys           one profiled run of 3 steps (if nsys is installed)
set -u

if [ $# -ne 1 ] || [ -z "${1:-}" ]; then
    echo "usage: scripts/gpu_check.sh OUT_DIR" >&2
    exit 2
fi
OUT=$1
mkdir -p "$OUT" || { echo "gpu_check.sh: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${PTD_BUILD_DIR:-$ROOT/build}
BIN=$BUILD/bin
BUDGET=${PTD_GPU_CHECK_BUDGET_S:-480}
case $BUDGET in ''|*[!0-9]*) echo "gpu_check.sh: PTD_GPU_CHECK_BUDGET_S='$BUDGET'; expected whole seconds" >&2; exit 2;; esac
START=$(date +%s)
SUMMARY=$OUT/summary.txt
JOB=$ROOT/assets/jobs/tiny-gpt-8rank-bf16.toml
ONE_RANK=(--set cluster.gpus_per_node=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.sequence_parallel=false)
: > "$SUMMARY"

note() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# run_step NAME MAX_S CMD...: runs CMD with stdout+stderr to OUT/NAME.txt under a timeout of
# min(MAX_S, time left); records NAME, rc and seconds in the summary. rc 124: timed out.
run_step() {
    local name=$1 max=$2
    shift 2
    local remaining
    remaining=$(left)
    if [ "$remaining" -lt 20 ]; then
        note "$(printf '%-16s %-8s %6s  %s' "$name" "skipped" "-" "time budget spent (${BUDGET} s)")"
        return 0
    fi
    [ "$max" -gt "$remaining" ] && max=$remaining
    local t0 rc
    t0=$(date +%s)
    { echo "\$ $*"; echo; } > "$OUT/$name.txt"
    timeout --kill-after=10 "$max" "$@" >> "$OUT/$name.txt" 2>&1
    rc=$?
    local what="ok"
    [ $rc -ne 0 ] && what="FAILED (see $name.txt)"
    [ $rc -eq 124 ] && what="TIMED OUT after ${max} s"
    note "$(printf '%-16s rc=%-5s %5ss  %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$what")"
    return 0
}
not_run() { note "$(printf '%-16s %-8s %6s  %s' "$1" "not run" "-" "$2")"; }

note "gpu_check.sh — $(date -u '+%Y-%m-%d %H:%M:%S UTC') — commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') — build $BUILD"
note "budget ${BUDGET} s; every step's output is OUT_DIR/<step>.txt"
note ""

# ---- env ---------------------------------------------------------------------------------
{
    echo "host: $(hostname)   kernel: $(uname -r)"
    echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null)  dirty: $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) files"
    echo "nvcc: $( (command -v nvcc >/dev/null && nvcc --version | tail -2 | tr '\n' ' ') || (test -x /usr/local/cuda/bin/nvcc && /usr/local/cuda/bin/nvcc --version | tail -2 | tr '\n' ' ') || echo 'not found')"
    echo "driver: $( (command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1) || echo 'no nvidia-smi')"
    echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo 'not found')"
    echo "nsys: $(command -v nsys || echo 'not found')"
} > "$OUT/env.txt" 2>&1
note "$(printf '%-16s rc=%-5s %5ss  %s' env 0 0 "versions in env.txt")"

# ---- the device ----------------------------------------------------------------------------
GPU=0
if command -v nvidia-smi >/dev/null 2>&1; then
    run_step nvidia-smi 30 nvidia-smi
    if nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1 && grep -q '^GPU ' "$OUT/nvidia-smi-L.txt"; then GPU=1; fi
else
    echo "nvidia-smi not found: no NVIDIA driver on this machine" > "$OUT/nvidia-smi.txt"
    not_run nvidia-smi "no nvidia-smi: no NVIDIA driver"
fi
if [ $GPU -eq 1 ]; then
    note "GPU: $(head -1 "$OUT/nvidia-smi-L.txt")"
else
    note "NO GPU on this machine: the GPU steps below are recorded as 'not run' and NOTHING was measured on a GPU."
fi
note ""

for b in ptd-engine test_cublaslt_standin bench_engine; do
    [ -x "$BIN/$b" ] || note "missing: $BIN/$b (build it: cmake --build $BUILD)"
done

# ---- CPU-side parts (run everywhere) --------------------------------------------------------
if [ -x "$BIN/test_cublaslt_standin" ]; then
    run_step standin 240 "$BIN/test_cublaslt_standin"
else
    not_run standin "test_cublaslt_standin not built (needs ENABLE_CUDA)"
fi
if [ -x "$BIN/ptd-engine" ]; then
    run_step cpu_losses 120 "$BIN/ptd-engine" --job "$JOB" "${ONE_RANK[@]}" --steps 5 --backend cpu --run-dir "$OUT/run-cpu"
    run_step sim_losses 240 "$BIN/ptd-engine" --job "$JOB" "${ONE_RANK[@]}" --steps 5 --backend cuda-sim --run-dir "$OUT/run-sim"
else
    not_run cpu_losses "no ptd-engine"
fi

# The step losses of the tiny runs side by side (the engine's "step" JSON lines carry "loss").
write_losses() {
    local runs=() f
    for f in cpu_losses sim_losses e2e_1gpu; do [ -s "$OUT/$f.txt" ] && runs+=("$f"); done
    {
        echo "step ${runs[*]}"
        local i=1
        while [ $i -le 5 ]; do
            local row="$i"
            for f in "${runs[@]}"; do
                row="$row $(grep '"event":"step"' "$OUT/$f.txt" | grep -o '"loss":[-0-9.eE+]*' | sed -n "${i}p" | cut -d: -f2)"
            done
            echo "$row"
            i=$((i + 1))
        done
    } > "$OUT/losses.txt"
    note "$(printf '%-16s %-8s %6s  %s' losses "-" "-" "step losses of ${runs[*]} side by side in losses.txt")"
}
if [ -x "$BIN/ptd-engine" ] && [ $GPU -eq 0 ]; then write_losses; fi

# ---- GPU parts ---------------------------------------------------------------------------
if [ $GPU -eq 1 ]; then
    run_step ctest_gpu 240 ctest --test-dir "$BUILD" -L gpu --output-on-failure
    run_step e2e_1gpu 120 "$BIN/ptd-engine" --job "$JOB" "${ONE_RANK[@]}" --steps 5 --backend cuda --run-dir "$OUT/run-cuda"
    write_losses
    SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
    if [ -n "$SAN" ]; then
        for tool in memcheck racecheck synccheck; do
            run_step "sanitizer_$tool" 120 "$SAN" --tool "$tool" --error-exitcode 99 \
                "$BIN/ptd-engine" --job "$JOB" "${ONE_RANK[@]}" --steps 2 --backend cuda --run-dir "$OUT/run-$tool"
        done
    else
        not_run sanitizer "compute-sanitizer not found"
    fi
    run_step bench 300 "$BIN/bench_engine" --backend cuda
    if command -v nsys >/dev/null 2>&1; then
        run_step nsys 120 nsys profile -o "$OUT/profile" --force-overwrite true --stats=true \
            "$BIN/ptd-engine" --job "$JOB" "${ONE_RANK[@]}" --steps 3 --backend cuda --run-dir "$OUT/run-nsys"
    else
        not_run nsys "nsys not installed"
    fi
else
    for s in ctest_gpu e2e_1gpu sanitizer bench nsys; do not_run "$s" "no GPU (not measured)"; done
fi

note ""
note "total $(( $(date +%s) - START )) s of ${BUDGET} s"
# Exit status: 1 when a step that ran failed or timed out, else 0 (a machine without a GPU
# is not a failure of the script; the summary says what was not run).
if grep -Eq 'FAILED|TIMED OUT' "$SUMMARY"; then exit 1; fi
exit 0
