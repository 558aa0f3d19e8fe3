#!/usr/bin/env bash
# closed_loop.sh — does a calibrated estimate predict the bundled engine on this machine?
# (issue 27 point 4, docs/estimators.md "Cluster profile"). For each job of a matrix —
# tiny-gpt and a gpt2-124m-shaped model, 1, 2, 4 and 8 ranks, TP / PP / DP / ZeRO-1, fp32
# and bf16, more ranks than cores included — it runs `ptd calibrate` on the job, then
# `ptd estimate --profile` (predicted step time and interval), then `ptd launch` (measured:
# the median over ranks and steps 3..N of the engine's own step time), and prints
# predicted, measured and the error. Prints figures only; no assertions. Run it on an idle
# machine: calibration and run must see the same cores.
#
#   bench/closed_loop.sh [BUILD_BIN_DIR] [STEPS] [--quick]   (defaults: build/bin 8, full calibration)
#
# N is STEPS, or more where the predicted steps are short: enough for PTD_CLOSED_LOOP_SECONDS
# (default 10) of measured steps after the first two, at most 200. On shared cores a tiny job's
# steps scatter (tiny-gpt-8rank, 58 steps on the idle machine: 224 ms median, 48 ms standard
# deviation), and the median of 6 steps alone spans 183–278 ms between its 10th and 90th
# percentile over the run's windows: wider than the 15% the bench holds the model to.
#
# It prints the cores, the nice level and the load average before and after (the
# conditions a figure was measured under: other work on the cores moves every figure).
# PTD_CLOSED_LOOP_KEEP=DIR keeps the profiles, estimates and runs in DIR (to compare models on
# the same profiles later); without it they are removed. PTD_CLOSED_LOOP_TOML=FILE appends the
# run as a [[run]] table of assets/accuracy/closed_loop_residuals.toml's form to FILE (the
# model's own error, which every CPU profile's interval carries: docs/estimators.md, "Error
# bars"); PTD_CLOSED_LOOP_ID names the run there (default: the start time).
# PTD_CLOSED_LOOP_ONLY=REGEX runs only the jobs whose name matches (bash =~), to look at a few
# jobs' timelines without the whole matrix (one that is not a regex, or matches no job, exits 2);
# leave it unset for a run that goes in the table.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$src/build/bin}
steps=${2:-8}
quick=${3:-}
measure_s=${PTD_CLOSED_LOOP_SECONDS:-10}
if [ -n "${PTD_CLOSED_LOOP_KEEP:-}" ]; then
  mkdir -p "$PTD_CLOSED_LOOP_KEEP"
  work=$(cd "$PTD_CLOSED_LOOP_KEEP" && pwd)
else
  work=$(mktemp -d /tmp/ptd-closed-loop-XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
if [ -n "${PTD_CLOSED_LOOP_ONLY:-}" ]; then
  rc=0; [[ "" =~ $PTD_CLOSED_LOOP_ONLY ]] || rc=$?
  if [ "$rc" -eq 2 ]; then
    echo "closed_loop: error: PTD_CLOSED_LOOP_ONLY='$PTD_CLOSED_LOOP_ONLY' is not an extended regular expression (bash =~)" >&2
    exit 2
  fi
fi
conditions() { echo "$1: $(nproc) cores, nice $(nice), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"; }
conditions start
started_at=$(date -u +%FT%TZ)
start_conditions="$(nproc) cores, nice $(nice), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
toml_jobs=()

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

tiny=$src/assets/jobs/tiny-gpt-8rank.toml
tinybf=$src/assets/jobs/tiny-gpt-8rank-bf16.toml
gpt2=$src/assets/jobs/gpt2-124m-local.toml
# name | job | --set overrides (space-separated)
matrix=(
  "tiny 1 rank fp32|$tiny|cluster.gpus_per_node=1 parallel.tp=1 parallel.pp=1 parallel.zero=0 parallel.sequence_parallel=false"
  "tiny DP2 ZeRO-1|$tiny|cluster.gpus_per_node=2 parallel.tp=1 parallel.pp=1 parallel.sequence_parallel=false"
  "tiny TP2 SP|$tiny|cluster.gpus_per_node=2 parallel.tp=2 parallel.pp=1"
  "tiny PP2|$tiny|cluster.gpus_per_node=2 parallel.tp=1 parallel.pp=2 parallel.sequence_parallel=false"
  "tiny TP2 DP2|$tiny|cluster.gpus_per_node=4 parallel.tp=2 parallel.pp=1"
  "tiny TP2 PP2 DP2 fp32|$tiny|"
  "tiny TP2 PP2 DP2 bf16|$tinybf|"
  "gpt2 1 rank fp32|$gpt2|cluster.gpus_per_node=1 parallel.tp=1 parallel.pp=1 model.seq_len=128"
  "gpt2 TP2 bf16|$gpt2|cluster.gpus_per_node=2 parallel.tp=2 parallel.pp=1 model.seq_len=128 training.precision=bf16"
  "gpt2 TP2 PP2 fp32|$gpt2|model.seq_len=128"
  "gpt2 TP2 PP2 DP2 ZeRO-1|$gpt2|cluster.gpus_per_node=8 model.seq_len=128 training.global_batch=8 parallel.zero=1"
)

printf '%-26s %6s %12s %22s %12s %8s %s\n' job ranks predicted_s interval_s measured_s error inside
errors=()
for row in "${matrix[@]}"; do
  IFS='|' read -r name job sets <<<"$row"
  [[ -z ${PTD_CLOSED_LOOP_ONLY:-} || $name =~ $PTD_CLOSED_LOOP_ONLY ]] || continue
  ran_any=1
  args=()
  for s in $sets; do args+=(--set "$s"); done
  id=$(echo "$name" | tr -c 'A-Za-z0-9\n' '-')
  "$bin/ptd" calibrate "$job" "${args[@]}" ${quick:+--quick} -o "$work/$id.profile.toml" --run-root "$work" >"$work/$id.cal" 2>&1 ||
    { echo "$name: ptd calibrate failed:" >&2; tail -3 "$work/$id.cal" >&2; continue; }
  "$bin/ptd" estimate "$job" "${args[@]}" --profile "$work/$id.profile.toml" --json >"$work/$id.est.json" 2>"$work/$id.est.err" ||
    { echo "$name: ptd estimate failed:" >&2; cat "$work/$id.est.err" >&2; continue; }
  job_steps=$(jq -r --argjson n "$steps" --argjson t "$measure_s" \
    '[[$n, (2 + ($t / .step_s | ceil))] | max, 200] | min' "$work/$id.est.json")
  "$bin/ptd" launch "$job" "${args[@]}" --steps "$job_steps" --run-root "$work" --run-id "run-$id" >"$work/$id.launch" 2>&1 ||
    { echo "$name: ptd launch failed:" >&2; tail -3 "$work/$id.launch" >&2; continue; }
  measured=$(cat "$work/run-$id"/rank-*.log | grep '"event":"step"' | jq -r 'select(.step >= 3) | .time.step' | median)
  ranks=$(ls "$work/run-$id"/rank-*.log | wc -l)
  read -r pred lo hi <<<"$(jq -r '[.step_s, (.interval.step_s.lo // "nan"), (.interval.step_s.hi // "nan")] | @tsv' "$work/$id.est.json")"
  err=$(awk -v p="$pred" -v m="$measured" 'BEGIN { printf "%+.1f%%", (p - m) / m * 100 }')
  inside=$(awk -v l="$lo" -v h="$hi" -v m="$measured" 'BEGIN { if (l == "nan") print "-"; else print (m >= l && m <= h) ? "yes" : "no" }')
  interval=$(awk -v l="$lo" -v h="$hi" 'BEGIN { if (l == "nan") print "-"; else printf "%.4f-%.4f", l, h }')
  printf '%-26s %6d %12.4f %22s %12.4f %8s %s\n' "$name" "$ranks" "$pred" "$interval" "$measured" "$err" "$inside"
  errors+=("$(awk -v p="$pred" -v m="$measured" 'BEGIN { e = (p - m) / m * 100; print (e < 0 ? -e : e) }')")
  toml_jobs+=("$(printf '  { name = "%s", ranks = %d, predicted_s = %.6g, measured_s = %.6g },' "$name" "$ranks" "$pred" "$measured")")
done
if [ -z "${ran_any:-}" ]; then
  echo "closed_loop: error: PTD_CLOSED_LOOP_ONLY='$PTD_CLOSED_LOOP_ONLY' matches no job of the matrix" >&2
  exit 2
fi
[ ${#errors[@]} -gt 0 ] && printf 'median |error| over %d jobs: %.1f%% (target ≤ 15%%)\n' "${#errors[@]}" "$(printf '%s\n' "${errors[@]}" | median)"
conditions end
if [ -n "${PTD_CLOSED_LOOP_TOML:-}" ] && [ ${#toml_jobs[@]} -gt 0 ]; then
  {
    printf '\n[[run]]\nid = "%s"\nmeasured_at = "%s"\nconditions = "%s"\n' "${PTD_CLOSED_LOOP_ID:-$started_at}" "$started_at" "$start_conditions"
    printf 'command = "PTD_CLOSED_LOOP_SECONDS=%s bench/closed_loop.sh %s %s%s"\njob = [\n' "$measure_s" "${1:-build/bin}" "$steps" "${quick:+ --quick}"
    printf '%s\n' "${toml_jobs[@]}"
    printf ']\n'
  } >>"$PTD_CLOSED_LOOP_TOML"
  echo "appended the run to $PTD_CLOSED_LOOP_TOML"
fi
