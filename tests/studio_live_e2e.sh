#!/usr/bin/env bash
# studio_live_e2e.sh PTD_STUDIO OUT_DIR — one click on Launch, end to end: ptd-studio under
# Xvfb with --auto-launch trains the tiny local job (4 ranks of the real ptd-engine) for 5
# steps, takes a screenshot of the Live tab once the run has ended, and prints what the Live
# panel received. Every rank must have reported step 5, and the PNG must be a real render.
# Then the same with the tiny 8-rank job on the Schedule tab: once the run has ended, its
# measured timeline is under the prediction (docs/images/studio-schedule-measured.png); and
# with one rank slowed (the engine's test hook) the rank grid marks it as a straggler.
# Exit 77 (ctest SKIP_RETURN_CODE) when Xvfb is not installed.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)  # before the cd below
studio=${1:?usage: studio_live_e2e.sh PTD_STUDIO OUT_DIR}
out=${2:?usage: studio_live_e2e.sh PTD_STUDIO OUT_DIR}
mkdir -p "$out"
if ! command -v Xvfb >/dev/null 2>&1; then
    echo "SKIP: Xvfb not available (apt-get install xvfb)"
    exit 77
fi
. "$src/tests/xvfb_lib.sh"
start_xvfb "$out" || { echo "FAIL: could not start Xvfb ($(tail -3 "$out/xvfb.log"))"; exit 1; }

# shoot NAME TIMEOUT [VAR=VALUE ...] -- STUDIO ARGS...: ptd-studio --auto-launch … with
# --screenshot $out/NAME.png (and the environment given); sets $report (its stdout, echoed)
# and $png, and fails the script when it did not exit 0 or wrote no picture.
shoot() {
    local name=$1 limit=$2 vars=()
    shift 2
    while [ "$1" != "--" ]; do vars+=("$1"); shift; done
    shift
    png="$out/$name.png"
    rm -f "$png"
    report=$(env "${vars[@]}" DISPLAY=$display LIBGL_ALWAYS_SOFTWARE=1 timeout "$limit" "$studio" "$@" --frames 5 \
        --screenshot "$png" 2>"$out/$name.err")
    local rc=$?
    echo "$report"
    [ "$rc" -eq 0 ] || { echo "FAIL: $name: exit $rc: $(tail -5 "$out/$name.err")"; exit 1; }
    [ -f "$png" ] || { echo "FAIL: $png was not written"; exit 1; }
}
colours_over() {  # MIN WHAT: the last screenshot has more than MIN distinct colours
    local colours
    colours=$(sed -n 's/^screenshot: .*, \([0-9][0-9]*\) distinct colours.*/\1/p' <<<"$report")
    [ "${colours:-0}" -gt "$1" ] || { echo "FAIL: only ${colours:-0} distinct colours in the $2 screenshot"; exit 1; }
}

cd "$out" || exit 1  # the run directory goes under ./runs
shoot live_e2e 180 -- --auto-launch --steps 5
grep -q "^live: run .*, finished, 4 ranks, last step per rank: 0=5 1=5 2=5 3=5$" <<<"$report" ||
    { echo "FAIL: the Live panel did not get step 5 from every rank"; exit 1; }
colours_over 50 Live
echo "ok: live panel after --auto-launch: $png"

# The Schedule tab after a launch from the studio: the tiny 8-rank job (TP 2 · PP 2 · DP 2)
# trains 5 steps, and once the run has ended its measured timeline (the engine records the
# first 3 steps) is under the prediction. The screenshot is docs/images/studio-schedule-measured.png.
shoot schedule_measured_e2e 240 -- --job "$src/assets/jobs/tiny-gpt-8rank.toml" --auto-launch --steps 5 --panel schedule
grep -q "^live: run .*, finished, 8 ranks, last step per rank: 0=5 1=5 2=5 3=5 4=5 5=5 6=5 7=5$" <<<"$report" ||
    { echo "FAIL: the 8-rank run did not reach step 5 on every rank"; exit 1; }
grep -q "^schedule: measured timeline of .*, step 3, 8 ranks, " <<<"$report" ||
    { echo "FAIL: the Schedule tab did not show the run's measured timeline (step 3 of 8 ranks)"; exit 1; }
colours_over 50 Schedule
echo "ok: schedule tab with the launched run's measured timeline: $png"

# A straggler on the rank grid: the 8-rank job again with rank 5's forward and backward
# blocks 20 ms longer (the engine's PTD_ENGINE_INJECT_SLOW_RANK hook, inherited by the
# ranks the studio launches). Once the run has ended the grid marks rank 5 (and only it)
# from the run's measured timeline (docs/images/studio-straggler.png).
shoot straggler_e2e 240 PTD_ENGINE_INJECT_SLOW_RANK=5:20 -- --job "$src/assets/jobs/tiny-gpt-8rank.toml" --auto-launch \
    --steps 4 --panel layout --mouse 1083,185
grep -q "^grid: stragglers marked: rank 5 on host 0 (localhost (local)) (+[0-9]*%)$" <<<"$report" ||
    { echo "FAIL: the rank grid did not mark rank 5, and only it, as a straggler"; exit 1; }
echo "ok: the rank grid marks the slowed rank: $png"
