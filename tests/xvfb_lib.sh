# xvfb_lib.sh — sourced by the studio's end-to-end scripts: start_xvfb OUT_DIR starts an
# Xvfb on the first free display of :99..:140 and sets $display (killed on exit). Returns 1
# when none starts; callers check `command -v Xvfb` first to skip (exit 77) when missing.
xvfb_pid=
stop_xvfb() { [ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null && wait "$xvfb_pid" 2>/dev/null; }
trap stop_xvfb EXIT

start_xvfb() {  # OUT_DIR
    display=
    local n
    for n in $(seq 99 140); do
        [ -e "/tmp/.X11-unix/X$n" ] || [ -e "/tmp/.X$n-lock" ] && continue
        Xvfb ":$n" -screen 0 1600x1000x24 -nolisten tcp >"$1/xvfb.log" 2>&1 &
        xvfb_pid=$!
        for _ in $(seq 1 100); do  # up to 10 s
            [ -e "/tmp/.X11-unix/X$n" ] && break
            kill -0 "$xvfb_pid" 2>/dev/null || break
            sleep 0.1
        done
        if [ -e "/tmp/.X11-unix/X$n" ] && kill -0 "$xvfb_pid" 2>/dev/null; then
            display=":$n"
            return 0
        fi
        kill "$xvfb_pid" 2>/dev/null
        wait "$xvfb_pid" 2>/dev/null
        xvfb_pid=
    done
    return 1
}
