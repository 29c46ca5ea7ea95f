#!/usr/bin/env bash
# A command that outlives one device call (600 s at most), for a fit too long for a call:
# Ultralytics' segment batch-4 row at 30 epochs took 401.9 s on one H100 lease (session 46) and
# about 607 s (extrapolated from a cut fit) on another (session 45), more than a call has left
# after the replayed fit. The device machine ends what a call leaves running when the call
# returns, except a process in a session of its own (setsid), which runs until the machine goes
# back, where the commands run as root (the lending service's notes; session 46's H100 ran
# them as root). The next call must come within the machine's idle release (30 s), or the
# machine, and the command with it, is gone.
#   start NAME SECONDS -- COMMAND...   starts COMMAND in a process session of its own, its
#                                      output in $DETACHED_DIR/NAME.log, and waits until it ends
#                                      or SECONDS pass (0: returns at once)
#   wait NAME SECONDS                  waits again, in a later call, until NAME ends or SECONDS
#                                      pass
# Exit status: COMMAND's when it ended, 124 while it still runs, 3 when it ended without one
# (killed: out of memory, the machine's end), 2 for a wrong use (a name already running, an
# unknown name). DETACHED_DIR defaults to /tmp/detached.
# Example, the segment row in two calls on one lease (session 46 ran these steps with setsid
# written into its call's script, before this tool):
#   call 1: ENVIRONMENTS=own ROW=segment-b4 TOOLS=replay OUT=/tmp/seg bash tools/gpu_speed.sh
#           bash tools/gpu_detached.sh start seg-ult 400 -- env ENVIRONMENTS=own ROW=segment-b4 \
#               TOOLS=ultralytics ROUND=1 WARM_UP=0 FIT_TIMEOUT=1000 OUT=/tmp/seg-ult \
#               MERGE=/tmp/seg/segment-b4/side_by_side.json bash tools/gpu_speed.sh
#   call 2: bash tools/gpu_detached.sh wait seg-ult 560
#           cp /tmp/seg-ult/segment-b4/side_by_side.json "$OUT"/
set -u
dir=${DETACHED_DIR:-/tmp/detached}

usage() {
    echo "usage: $0 start NAME SECONDS -- COMMAND... | $0 wait NAME SECONDS" >&2
    exit 2
}

# alive NAME: whether NAME's process session leader still runs
alive() {
    kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null
}

# wait_for NAME SECONDS: the command's exit status once it ended, 3 if it ended without one,
# else 124 after SECONDS
wait_for() {
    local name=$1 seconds=$2 began=$SECONDS
    while [ ! -f "$dir/$name.rc" ] && alive "$name" && [ $((SECONDS - began)) -lt "$seconds" ]; do
        sleep 1
    done
    if [ ! -f "$dir/$name.rc" ] && ! alive "$name"; then
        echo "$name: ended without an exit status (killed?); its output: $dir/$name.log"
        return 3
    fi
    if [ -f "$dir/$name.rc" ]; then
        local rc
        rc=$(cat "$dir/$name.rc")
        echo "$name: ended with exit status $rc (output: $dir/$name.log)"
        return "$rc"
    fi
    echo "$name: still running after $seconds s; in the next call: $0 wait $name SECONDS"
    return 124
}

[ $# -ge 3 ] || usage
action=$1 name=$2 seconds=$3
case "$seconds" in
    '' | *[!0-9]*) echo "SECONDS=$seconds: not a whole number of seconds" >&2; exit 2 ;;
esac
case "$name" in
    '' | *[!A-Za-z0-9._-]*) echo "NAME=$name: use letters, digits, '.', '_' and '-'" >&2; exit 2 ;;
esac
seconds=$((10#$seconds))
shift 3
case "$action" in
    start)
        [ "${1:-}" = -- ] && [ $# -ge 2 ] || usage
        shift
        mkdir -p "$dir"
        if [ -f "$dir/$name.pid" ] && [ ! -f "$dir/$name.rc" ] && alive "$name"; then
            echo "$name: already running (pid $(cat "$dir/$name.pid")); wait for it or rename" >&2
            exit 2
        fi
        rm -f "$dir/$name.rc" "$dir/$name.rc.part"
        [ "$(id -u)" = 0 ] || echo "$name: not root: the machine ends it when this call returns" >&2
        # the status file is written last, after the command's own exit: its presence means done
        setsid bash -c '"$@"; echo $? > "$0.rc.part" && mv "$0.rc.part" "$0.rc"' "$dir/$name" "$@" \
            > "$dir/$name.log" 2>&1 < /dev/null &
        echo $! > "$dir/$name.pid"
        wait_for "$name" "$seconds"
        ;;
    wait)
        [ $# -eq 0 ] || usage
        if [ ! -f "$dir/$name.pid" ]; then
            echo "$name: never started here (no $dir/$name.pid); a fresh machine has none" >&2
            exit 2
        fi
        wait_for "$name" "$seconds"
        ;;
    *) usage ;;
esac
