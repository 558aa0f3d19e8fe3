#!/usr/bin/env bash
# output_snapshot.sh — write everything the estimators print for every asset job into one
# folder, so that a refactoring can show its outputs are byte-identical: run it on the build
# before and after, then `diff -r BEFORE AFTER`.
#
#   scripts/output_snapshot.sh BIN_DIR OUT_DIR
#
# Per job (assets/jobs/*.toml, plus @default and @tiny): validate --json and --print,
# layout --json, estimate (text and --json), schedule --json, plan --json --top 20, export in
# every format of the job and of its plan, and estimate with --set overrides. Each command's
# stdout, stderr and exit code go to their own files (a refusal is an output too).
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: scripts/output_snapshot.sh BIN_DIR OUT_DIR" >&2
  exit 2
fi
bin=$1
out=$2
ptd="$bin/ptd"
if [[ ! -x "$ptd" ]]; then
  echo "output_snapshot: error: $ptd is not an executable (build first)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
mkdir -p "$out"

# run NAME ARGS...: stdout, stderr and exit status of `ptd ARGS...` under OUT_DIR/NAME.*
run() {
  local name=$1
  shift
  NO_COLOR=1 "$ptd" "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
  # The planner's own wall time is the one figure that varies from run to run.
  sed -i -E 's/^(  "seconds": )[0-9.e+-]+/\1(masked)/' "$out/$name.out"
}

jobs=(@default @tiny)
for f in assets/jobs/*.toml; do jobs+=("$f"); done

for job in "${jobs[@]}"; do
  name=$(basename "$job" .toml)
  name=${name#@}
  run "$name.validate" validate "$job" --json
  run "$name.print" validate "$job" --print
  run "$name.layout" layout "$job" --json
  run "$name.estimate" estimate "$job"
  run "$name.estimate-json" estimate "$job" --json
  run "$name.schedule" schedule "$job" --json
  run "$name.plan" plan "$job" --json --top 20
  for format in megatron deepspeed torchtitan torchtitan-toml; do
    run "$name.export-$format" export "$job" --format "$format"
    run "$name.export-plan-$format" export "$job" --format "$format" --plan
  done
  # --set overrides: several keys in one command, across tables, and one refusal.
  run "$name.estimate-set" estimate "$job" --json --set training.micro_batch=2 \
    --set parallel.recompute=\"full\" --set estimate.headroom=0.1
  run "$name.estimate-set-bad" estimate "$job" --set parallel.tp=true
done
run presets presets --json
echo "output_snapshot: wrote $(ls "$out" | wc -l) files for ${#jobs[@]} jobs under $out"
