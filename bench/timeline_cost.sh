#!/usr/bin/env bash
# timeline_cost.sh — what recording the measured timeline costs (docs/engine.md, "Measured
# timeline"): the tiny 8-rank job (assets/jobs/tiny-gpt-8rank.toml, TP 2 · PP 2 · DP 2)
# launched with `ptd launch`, alternately with --timeline-all (every step recorded) and
# --timeline-steps 0 (nothing recorded), RUNS times each. Per run: the median over ranks and
# steps 3..STEPS of the engine's own step time (metrics `time.step`); then the median of
# those per setting and the difference. Alternating on/off pairs spreads the drift of a
# shared machine over both settings. Prints figures only; no assertions.
#
#   bench/timeline_cost.sh [BUILD_BIN_DIR] [RUNS] [STEPS]     (defaults: build/bin 5 20)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$src/build/bin}
runs=${2:-5}
steps=${3:-20}
job=$src/assets/jobs/tiny-gpt-8rank.toml
work=$(mktemp -d /tmp/ptd-timeline-cost-XXXXXX)
trap 'rm -rf "$work"' EXIT

# Median of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# One launch; prints the median step time (s) over every rank's steps 3..steps.
one_run() {
    local id=$1; shift
    "$bin/ptd" launch "$job" --steps "$steps" --run-root "$work" --run-id "$id" -- "$@" >"$work/$id.out" 2>&1 ||
        { echo "ptd launch failed ($id):" >&2; tail -5 "$work/$id.out" >&2; exit 1; }
    cat "$work/$id"/rank-*.log | grep '"event":"step"' |
        jq -r --argjson first 3 'select(.step >= $first) | .time.step' | median
}

on=() off=()
for ((k = 1; k <= runs; ++k)); do
    off+=("$(one_run "off-$k" --timeline-steps 0)")
    on+=("$(one_run "on-$k" --timeline-all)")
    [ -d "$work/on-$k/timeline" ] || { echo "the --timeline-all run wrote no timeline folder" >&2; exit 1; }
    [ ! -d "$work/off-$k/timeline" ] || { echo "the --timeline-steps 0 run wrote a timeline folder" >&2; exit 1; }
    printf 'pair %d: off %.1f ms, on %.1f ms\n' "$k" "$(echo "${off[-1]} * 1000" | bc -l)" "$(echo "${on[-1]} * 1000" | bc -l)"
done
blocks=$(grep -vc '^#\|^ptd-timeline' "$work/on-1/timeline/rank-00000.tsv")
m_off=$(printf '%s\n' "${off[@]}" | median)
m_on=$(printf '%s\n' "${on[@]}" | median)
printf 'median step: off %.1f ms, on %.1f ms: %+.1f%% (%d runs each, steps 3..%d, 8 ranks; rank 0 recorded %d blocks in %d steps)\n' \
    "$(echo "$m_off * 1000" | bc -l)" "$(echo "$m_on * 1000" | bc -l)" "$(echo "($m_on / $m_off - 1) * 100" | bc -l)" \
    "$runs" "$steps" "$blocks" "$steps"
