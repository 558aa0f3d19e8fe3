#!/usr/bin/env bash
# fuzz.sh — build the libFuzzer targets with clang and run each for a bounded time.
#
#   scripts/fuzz.sh                 # every target, 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh hf_config
#
# Targets (tests/fuzz/fuzz_<target>.cpp):
#   job_toml   ptd::load_job_text + the save → load round trip
#   hf_config  ptd::import_hf_config_text
#   hostfile   ptd::parse_hostfile
#   kv_wire              the rendezvous store's framing and message decoding, server and
#                        client side (engine/gloo/kv_wire.h)
#   metrics_event        ptd::parse_metrics_line (the lines the launcher reads from ranks)
#   timeline             ptd::parse_measured_rank (RUN_DIR/timeline/rank-*.tsv)
#   run_manifest         ptd::manifest_from_json + the write → read round trip
#   checkpoint_manifest  ptd::engine::parse_manifest (checkpoints/step-N/manifest.json)
#   cluster_profile      ptd::load_profile_text + the write → read round trip
#
# Environment:
#   FUZZ_SECONDS  run time per target (default 60)
#   FUZZ_BUILD    build folder (default <repo>/build-fuzz)
#   CC, CXX       compilers (default clang, clang++; libFuzzer needs clang)
#
# Dictionaries: tests/fuzz/<target>.dict.
# Seeds come from tests/fuzz/corpus/<target>/, tests/fuzz/regressions/<target>/ and the
# bundled inputs (assets/jobs + assets/presets for job_toml, tests/data/hf for
# hf_config; the other targets have only their corpus). New interesting inputs are kept in
# <build>/corpus/<target>/ (not in git), so repeated runs continue where the last one
# stopped.
#
# On a crash, leak, timeout or out-of-memory, the offending input is copied into
# tests/fuzz/regressions/<target>/ and the script exits non-zero: commit that file with
# the fix, and test_fuzz_regressions replays it in every normal build from then on.
#
# Safe to run again at any time: configure and build are incremental, seed folders are
# only read, and regression files are named by the content hash libFuzzer gives them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FUZZ_BUILD:-$ROOT/build-fuzz}"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-60}"
ALL_TARGETS=(job_toml hf_config hostfile kv_wire metrics_event timeline run_manifest checkpoint_manifest cluster_profile)

if ! [[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || [[ "$SECONDS_PER_TARGET" -eq 0 ]]; then
  echo "fuzz.sh: FUZZ_SECONDS must be a positive whole number of seconds, got '$SECONDS_PER_TARGET'" >&2
  exit 2
fi

# Targets from the command line, or all of them.
if [[ $# -gt 0 ]]; then
  TARGETS=("$@")
  for t in "${TARGETS[@]}"; do
    if [[ ! " ${ALL_TARGETS[*]} " == *" $t "* ]]; then
      echo "fuzz.sh: unknown target '$t'; allowed: ${ALL_TARGETS[*]}" >&2
      exit 2
    fi
  done
else
  TARGETS=("${ALL_TARGETS[@]}")
fi

CC="${CC:-clang}"
CXX="${CXX:-clang++}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "fuzz.sh: $CXX not found; install clang and libclang-rt-dev (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi

# ---- build ------------------------------------------------------------------------------
# Only the fuzz targets are built; the studio and CUDA are off to keep the build small.
# The tests folder must be configured because the PTD_FUZZ block lives there.
echo "== configuring $BUILD with $CXX"
cmake -S "$ROOT" -B "$BUILD" -G Ninja \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPTD_FUZZ=ON -DPTD_BUILD_TESTS=ON -DPTD_BUILD_STUDIO=OFF -DENABLE_CUDA=OFF >/dev/null
echo "== building ${TARGETS[*]/#/fuzz_}"
cmake --build "$BUILD" --target "${TARGETS[@]/#/fuzz_}"

# ---- dictionaries -----------------------------------------------------------------------
# Tokens libFuzzer splices into inputs (tests/fuzz/<target>.dict): syntax, nesting openers
# (deep dotted keys, nested arrays and tables) and field names, so that it reaches the
# field-level code and the depth limits quickly.
for t in "${TARGETS[@]}"; do
  if [[ ! -f "$ROOT/tests/fuzz/$t.dict" ]]; then
    echo "fuzz.sh: tests/fuzz/$t.dict is missing" >&2
    exit 2
  fi
done

# ---- seeds ------------------------------------------------------------------------------
# Folders libFuzzer reads seeds from (read-only; new inputs go to the first folder given).
seed_dirs() {
  local target="$1"
  local dirs=("$ROOT/tests/fuzz/corpus/$target" "$ROOT/tests/fuzz/regressions/$target")
  if [[ "$target" == job_toml ]]; then
    dirs+=("$ROOT/assets/jobs" "$ROOT/assets/presets")
  elif [[ "$target" == hf_config ]]; then
    dirs+=("$ROOT/tests/data/hf")
  fi
  local d
  for d in "${dirs[@]}"; do
    [[ -d "$d" ]] && printf '%s\n' "$d"
  done
  return 0
}

# ---- run --------------------------------------------------------------------------------
# UBSan is compiled non-recovering; these make every sanitizer report abort with a stack.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:symbolize=1}"

failed=()
for target in "${TARGETS[@]}"; do
  bin="$BUILD/bin/fuzz_$target"
  work="$BUILD/corpus/$target"           # grows across runs; not committed
  artifacts="$BUILD/artifacts/$target"   # this run's crashing inputs
  regress="$ROOT/tests/fuzz/regressions/$target"
  log="$BUILD/fuzz-$target.log"
  mkdir -p "$work" "$regress"
  rm -rf "$artifacts" && mkdir -p "$artifacts"
  mapfile -t seeds < <(seed_dirs "$target")

  echo "== fuzzing $target for ${SECONDS_PER_TARGET}s (log: $log)"
  rc=0
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: over 2 GiB is a leak/bomb.
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
         -print_final_stats=1 -dict="$ROOT/tests/fuzz/$target.dict" \
         -artifact_prefix="$artifacts/" "$work" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' "$log" || true

  # libFuzzer names what it saves crash-*, leak-*, timeout-*, oom-*, slow-unit-* (the
  # last is only slow, not a failure).
  found=0
  for f in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
    [[ -e "$f" ]] || continue
    cp -f "$f" "$regress/"
    echo "!! $target: saved $(basename "$f") to ${regress#"$ROOT"/}/"
    found=1
  done
  if [[ $rc -ne 0 || $found -ne 0 ]]; then
    echo "!! $target failed (exit $rc). Report:" >&2
    grep -E -A40 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|property violated' "$log" | head -80 >&2 || tail -40 "$log" >&2
    failed+=("$target")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  cat >&2 <<EOF

fuzz.sh: ${failed[*]} found a problem. The crashing inputs are now in
tests/fuzz/regressions/<target>/. Fix the bug, check that
  ./build/bin/test_fuzz_regressions
passes, and commit those files together with the fix as regression tests.
Reproduce one with:  $BUILD/bin/fuzz_<target> tests/fuzz/regressions/<target>/<file>
EOF
  exit 1
fi
echo "== fuzz.sh: no crashes in ${TARGETS[*]} (${SECONDS_PER_TARGET}s each)"
