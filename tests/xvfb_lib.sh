# xvfb_lib.sh — sourced by the studio's end-to-end scripts: start_xvfb OUT_DIR starts a
# private Xvfb and sets $display (killed on exit). Returns 1 when none starts; callers check
# `command -v Xvfb` first to skip (exit 77) when missing.
#
# Why -displayfd: Xvfb itself claims the first free display (it creates /tmp/.Xn-lock
# atomically) and writes the number once it accepts connections. Choosing the number here
# by looking for a free socket raced when two tests started at once under `ctest -j`: both
# saw :99 free, the second server exited ("already active") after the first had made the
# socket, the second test took :99 as its own, and when the first test finished and killed
# its server the second one's screenshots failed mid-run ("XIO: fatal IO error").
xvfb_pid=
stop_xvfb() { [ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null && wait "$xvfb_pid" 2>/dev/null; }
trap stop_xvfb EXIT

start_xvfb() {  # OUT_DIR
    display=
    local numfile="$1/xvfb.display" n=
    : >"$numfile"
    Xvfb -displayfd 3 -screen 0 1600x1000x24 -nolisten tcp 3>"$numfile" >"$1/xvfb.log" 2>&1 &
    xvfb_pid=$!
    for _ in $(seq 1 100); do  # up to 10 s
        n=$(tr -dc 0-9 <"$numfile")
        [ -n "$n" ] && break
        kill -0 "$xvfb_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -n "$n" ] && kill -0 "$xvfb_pid" 2>/dev/null; then
        display=":$n"
        return 0
    fi
    kill "$xvfb_pid" 2>/dev/null
    wait "$xvfb_pid" 2>/dev/null
    xvfb_pid=
    return 1
}
