#!/usr/bin/env bash
# Issue 11's whole-fit table, one round of one row per device call (a call holds at most 600 s):
# each row's fits alternate between Ultralytics and lucid-yolo (replayed, native), each a fresh
# process, 640 px, bf16, 512/128 synthetic images. Rounds of later calls join earlier ones
# through MERGE, so medians and ranges build up across calls.
#   ROW=detect-b16   detect, batch 16
#   ROW=detect-b4    detect, batch 4
#   ROW=segment-b4   segment, batch 4
#   EPOCHS=<n>       the row's epochs (default 30, as issue 11's goals ask, so that start-up is
#                    amortised; sessions 11-19 ran the batch-4 rows at 6)
# A round's length on one H200 at 30 epochs (2026-12-03, session 20, a slow machine state):
# detect-b16 with Ultralytics and replay 175 s (119 + 56) after the 16 s warm-up; detect-b4
# 521 s (Ultralytics 368, replay 153 without the warm-up), so that row needs a call to itself,
# warm-up left out (session 32, 2026-12-04: Ultralytics' training alone took about 425 s and the
# replayed fit 99 s, which with the warm-up and the own closures' set-up overflowed a 600 s call
# and cut Ultralytics in its last epoch: give Ultralytics a call of its own, TOOLS=ultralytics,
# then TOOLS=replay with MERGE, and say so beside the numbers); segment-b4 replayed 116-140 s
# (sessions 44-46), Ultralytics' 30 epochs 401.9 s on one H100 lease and about 607 s
# (extrapolated from a cut fit) on another (sessions 46 and 45): more than a call may have
# left, so run the replayed fit first, then Ultralytics' with MERGE under
# tools/gpu_detached.sh, which outlives the call, and collect it in the next call (its header
# has the two calls). Add about 150 s per 30 batch-16 epochs for a native fit (session 11).
#   ROUND=<n>        this call's round (rotates the order; default 0)
#   TOOLS=...        default ultralytics,replay,native
#   MERGE="a.json b.json"   side_by_side.json files of the row's earlier rounds
#   WARM_UP=0        skip the warm-up below: for a later row of the same call, whose machine the
#                    first row already warmed (saves its 16-23 s)
#   ENVIRONMENTS=own each tool runs from a fresh environment of its own dependency closure, linked
#                    from the machine's libraries under /tmp/lucid-envs (dependency_closure.py),
#                    as a user installing it into a new environment has it; default: the
#                    machine's environment, whose other libraries load into both tools
#   SUBSTITUTE="name=dist ..."   with ENVIRONMENTS=own: a requirement the machine satisfies
#                    under another distribution's name; default: opencv-python=opencv-python-headless
#                    where the machine has the headless build and not opencv-python (the GPU
#                    machine: Ultralytics' closure would otherwise lack cv2), else none;
#                    SUBSTITUTE="" for none
#   FIT_TIMEOUT=<s>  cut each fit after this many seconds (default 3600): set it below the call's
#                    own limit, so that a fit too long for the call is cut by the tool, which then
#                    still writes the report with the cut fit's finished epochs, instead of the
#                    call's limit killing the tool before it writes anything
# Every call first warms the machine for both tools alike (untimed): compiled bytecode for every
# module on the import path in /tmp/lucid-bench-pyc (the GPU machine sets PYTHONDONTWRITEBYTECODE=1
# over sources without bytecode; an installed package has it), then one process imports torch,
# CUDA and both trainers.
# Usage (repository root, `.whl` carried: tools/gpu_env.sh, sourced below, installs the
# Ultralytics wheels; the machine to itself):
#   ROW=detect-b16 ROUND=1 MERGE=prev/side_by_side.json OUT=... bash tools/gpu_speed.sh
set -u
source "$(dirname "$0")/gpu_env.sh" || exit 1
case "${ROW:?set ROW to detect-b16, detect-b4 or segment-b4}" in
    detect-b16) row=(--tasks detect --batch 16) ;;
    detect-b4) row=(--tasks detect --batch 4) ;;
    segment-b4) row=(--tasks segment --batch 4) ;;
    *) echo "ROW=$ROW: not a row; use detect-b16, detect-b4 or segment-b4" >&2; exit 2 ;;
esac
row+=(--epochs "${EPOCHS:-30}")
merge=()
[ -n "${MERGE:-}" ] && read -r -a merge <<< "--merge $MERGE"
warm=()
[ "${WARM_UP:-1}" = 0 ] && warm=(--no-warm-up)
environments=()
if [ "${ENVIRONMENTS:-machine}" = own ]; then
    environments=(--own-environments /tmp/lucid-envs)
    if [ -z "${SUBSTITUTE+set}" ]; then
        SUBSTITUTE=$(python3 -c 'import importlib.metadata as m
names = {d.metadata["Name"].lower() for d in m.distributions()}
if "opencv-python-headless" in names and "opencv-python" not in names:
    print("opencv-python=opencv-python-headless")')
    fi
    for pair in $SUBSTITUTE; do
        environments+=(--substitute "$pair")
    done
elif [ "${ENVIRONMENTS:-machine}" != machine ]; then
    echo "ENVIRONMENTS=$ENVIRONMENTS: use own or machine" >&2; exit 2
fi
python3 tools/bench_side_by_side.py "${row[@]}" --imgsz 640 --images 512 --val-images 128 \
    --tools "${TOOLS:-ultralytics,replay,native}" --first-round "${ROUND:-0}" "${merge[@]}" "${warm[@]}" "${environments[@]}" \
    --timeout "${FIT_TIMEOUT:-3600}" \
    --bytecode-cache /tmp/lucid-bench-pyc --out "$OUT/$ROW" --runs-dir "/tmp/speed-runs-$ROW"
