#!/usr/bin/env bash
# docs_screenshots.sh — regenerate the pictures in docs/images/ that docs/studio.md shows,
# with ptd-studio itself under a private Xvfb (the same --screenshot path the tests use).
# The Launch and Live pictures come from real runs of the bundled engine.
#
#   scripts/docs_screenshots.sh [BUILD_DIR]     (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=${1:-build}/bin
out=$root/docs/images
command -v Xvfb >/dev/null || { echo "docs_screenshots: needs Xvfb (apt-get install xvfb)" >&2; exit 1; }
work=$(mktemp -d /tmp/ptd-docs-shots-XXXXXX)
mkdir -p "$out"
. tests/xvfb_lib.sh
# After sourcing: xvfb_lib.sh sets its own EXIT trap (stop_xvfb), which would replace ours
# and leave the work folder behind.
trap 'stop_xvfb; rm -rf "$work"' EXIT
start_xvfb "$work" || { echo "docs_screenshots: could not start Xvfb" >&2; exit 1; }

shoot() {  # NAME ARGS... (run in $work so runs/ lands there; recent files stay out of ~/.config)
    (cd "$work" && DISPLAY=$display LIBGL_ALWAYS_SOFTWARE=1 XDG_CONFIG_HOME=$work/config \
        timeout 300 "$root/$bin/ptd-studio" --size 1400x860 --screenshot "$out/$1.png" "${@:2}" | grep '^screenshot')
}

shoot studio-layout --panel layout --mouse 760,260 --color-by tp
shoot studio-memory --panel memory --mouse 520,160 --set training.tokens=1e12 --set cluster.gpu_hour_usd=2.5
shoot studio-planner --panel planner
# Every dimension: Mixtral 8x7B with ep 8, coloured by EP group, rank 0 pinned.
shoot studio-layout-ep --job "$root/tests/data/studio/mixtral-8x7b-ep8.toml" --panel layout --select 0 --color-by ep
# The tiny 8-rank job's predicted schedule (blocks wide enough to be drawn one by one).
shoot studio-schedule --job "$root/assets/jobs/tiny-gpt-8rank.toml" --panel schedule
# A schedule at real size: Llama-3 70B with cp 2 and vpp 5 (512 micro-batches) as spans.
shoot studio-schedule-70b --job "$root/assets/jobs/llama3-70b-h100.toml" --set parallel.cp=2 --panel schedule
# Two layouts side by side: the 8-node 70B job pinned beside the 64-node one.
shoot studio-compare --job "$root/assets/jobs/llama3-70b-h100-64nodes.toml" --compare "$root/assets/jobs/llama3-70b-h100.toml" --panel compare
shoot studio-launch --auto-launch --steps 20 --panel launch
shoot studio-live --auto-launch --steps 40 --panel live --mouse 620,330
# The same tab for the 8-rank job with this machine's cluster profile (ptd calibrate): the
# prediction and its interval beside the measurement (docs/estimators.md, "Error bars").
"$root/$bin/ptd" calibrate "$root/assets/jobs/tiny-gpt-8rank.toml" -o "$work/tiny8.profile.toml" --run-root "$work/runs" >/dev/null
"$root/$bin/ptd" validate "$root/assets/jobs/tiny-gpt-8rank.toml" --set cluster.profile="$work/tiny8.profile.toml" \
    --set training.data="$root/docs/engine.md" --print >"$work/tiny8-profiled.toml"
shoot studio-live-profiled --job "$work/tiny8-profiled.toml" --auto-launch --steps 40 --panel live --mouse 620,330
shoot studio-schedule-profiled --job "$work/tiny8-profiled.toml" --auto-launch --steps 5 --panel schedule
# 64 ranks of the tiny job on this machine's CPU (tp 2, pp 2, dp 16): medians and bands by PP stage.
(cd "$work" && "$root/$bin/ptd" launch "$root/assets/jobs/tiny-local.toml" --set cluster.gpus_per_node=64 \
    --set training.global_batch=32 --steps 6 --run-root "$work/runs" --run-id live64 >/dev/null)
shoot studio-live-64 --run "$work/runs/live64"
shoot studio-heatmap --job "$root/assets/jobs/tiny-gpt-8rank.toml" --auto-launch --steps 10 --panel layout --mouse 600,180
# The Schedule tab after a launched run of the 8-rank job: its measured timeline (the engine
# records the first 3 steps) under the prediction.
shoot studio-schedule-measured --job "$root/assets/jobs/tiny-gpt-8rank.toml" --auto-launch --steps 5 --panel schedule
# A straggler marked on the grid: the 8-rank job with rank 5 slowed by the engine's test hook
# (20 ms more per forward and backward block), hovered.
(export PTD_ENGINE_INJECT_SLOW_RANK=5:20
 shoot studio-straggler --job "$root/assets/jobs/tiny-gpt-8rank.toml" --auto-launch --steps 4 --panel layout --mouse 1083,185)
echo "docs_screenshots: wrote $(ls "$out"/studio-*.png | wc -l) pictures to docs/images/"
