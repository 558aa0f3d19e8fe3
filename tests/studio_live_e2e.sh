#!/usr/bin/env bash
# studio_live_e2e.sh PTD_STUDIO OUT_DIR — one click on Launch, end to end: ptd-studio under
# Xvfb with --auto-launch trains the tiny local job (4 ranks of the real ptd-engine) for 5
# steps, takes a screenshot of the Live tab once the run has ended, and prints what the Live
# panel received. Every rank must have reported step 5, and the PNG must be a real render.
# Then the same with the tiny 8-rank job on the Schedule tab: once the run has ended, its
# measured timeline is under the prediction (docs/images/studio-schedule-measured.png).
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

png="$out/live_e2e.png"
rm -f "$png"
cd "$out" || exit 1  # the run directory goes under ./runs
report=$(DISPLAY=$display LIBGL_ALWAYS_SOFTWARE=1 timeout 180 "$studio" --auto-launch --steps 5 --frames 5 \
    --screenshot "$png" 2>"$out/live_e2e.err")
rc=$?
echo "$report"
[ "$rc" -eq 0 ] || { echo "FAIL: exit $rc: $(tail -5 "$out/live_e2e.err")"; exit 1; }
[ -f "$png" ] || { echo "FAIL: $png was not written"; exit 1; }
grep -q "^live: run .*, finished, 4 ranks, last step per rank: 0=5 1=5 2=5 3=5$" <<<"$report" ||
    { echo "FAIL: the Live panel did not get step 5 from every rank"; exit 1; }
colours=$(sed -n 's/^screenshot: .*, \([0-9][0-9]*\) distinct colours.*/\1/p' <<<"$report")
[ "${colours:-0}" -gt 50 ] || { echo "FAIL: only ${colours:-0} distinct colours in the Live screenshot"; exit 1; }
echo "ok: live panel after --auto-launch: $png"

# The Schedule tab after a launch from the studio: the tiny 8-rank job (TP 2 · PP 2 · DP 2)
# trains 5 steps, and once the run has ended its measured timeline (the engine records the
# first 3 steps) is under the prediction. The screenshot is docs/images/studio-schedule-measured.png.
png8="$out/schedule_measured_e2e.png"
rm -f "$png8"
report=$(DISPLAY=$display LIBGL_ALWAYS_SOFTWARE=1 timeout 240 "$studio" --job "$src/assets/jobs/tiny-gpt-8rank.toml" \
    --auto-launch --steps 5 --panel schedule --frames 5 --screenshot "$png8" 2>"$out/schedule_e2e.err")
rc=$?
echo "$report"
[ "$rc" -eq 0 ] || { echo "FAIL: schedule run: exit $rc: $(tail -5 "$out/schedule_e2e.err")"; exit 1; }
[ -f "$png8" ] || { echo "FAIL: $png8 was not written"; exit 1; }
grep -q "^live: run .*, finished, 8 ranks, last step per rank: 0=5 1=5 2=5 3=5 4=5 5=5 6=5 7=5$" <<<"$report" ||
    { echo "FAIL: the 8-rank run did not reach step 5 on every rank"; exit 1; }
grep -q "^schedule: measured timeline of .*, step 3, 8 ranks, " <<<"$report" ||
    { echo "FAIL: the Schedule tab did not show the run's measured timeline (step 3 of 8 ranks)"; exit 1; }
colours=$(sed -n 's/^screenshot: .*, \([0-9][0-9]*\) distinct colours.*/\1/p' <<<"$report")
[ "${colours:-0}" -gt 50 ] || { echo "FAIL: only ${colours:-0} distinct colours in the Schedule screenshot"; exit 1; }
echo "ok: schedule tab with the launched run's measured timeline: $png8"
