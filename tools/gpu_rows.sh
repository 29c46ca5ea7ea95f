#!/usr/bin/env bash
# Issue 11's goal table in one command, on a GPU machine that lets one command run for about
# 25 minutes (`make bench-rows`; not yet run as one command). The lent device machine stops a
# call at 600 s: there, run the same steps a call each, as the Benchmarks page's first section
# lists them.
#   1. every row side by side with Ultralytics, 30 epochs, each tool in its own dependency
#      closure (tools/gpu_speed.sh, ENVIRONMENTS=own), ROUNDS rounds a row, each round's order
#      rotated and its report merged into the next;
#   2. the graphed forward+backward of the rows' nets at the rows' batches (the step ratio's
#      denominator, tools/bench_memory_format.py), set up as the fits run them: channels-last
#      with the convolutions' casts together (`YoloModule`'s default since session 49);
#   3. a replayed and a native 3-epoch fit a row, each a fresh process (the memory ratio);
#   4. each fit's readings (tools/fit_readings.py) in $OUT/rows.md.
# Lengths on session 46's H100 (one round): detect-b16 136 s, detect-b4 331 s, segment-b4
# 518 s of fits; the detect-b4 3-epoch pair 145 s on a fresh machine (its bytecode compiled).
#   ROWS="..."   the rows (default: detect-b16 detect-b4 segment-b4)
#   ROUNDS=<n>   rounds a row (default 1)
#   TOOLS=...    the rows' tools (default ultralytics,replay; add native for its 30-epoch fits:
#                at detect b4, 3,840 steps of about 113 ms, session 46's 3-epoch native step)
#   DRY_RUN=1    print the commands instead of running them
# Usage (repository root, `.whl` carried: tools/gpu_env.sh): bash tools/gpu_rows.sh
set -u
rows=${ROWS:-detect-b16 detect-b4 segment-b4}
rounds=${ROUNDS:-1}
case "$rounds" in
    '' | *[!0-9]*) echo "ROUNDS=$rounds: a whole number of rounds, at least 1" >&2; exit 2 ;;
esac
rounds=$((10#$rounds))
[ "$rounds" -ge 1 ] || { echo "ROUNDS=$rounds: a whole number of rounds, at least 1" >&2; exit 2; }
for row in $rows; do
    case "$row" in
        detect-b16 | detect-b4 | segment-b4) ;;
        *) echo "ROWS: $row is not a row; use detect-b16, detect-b4 or segment-b4" >&2; exit 2 ;;
    esac
done
if [ "${DRY_RUN:-0}" = 1 ]; then
    OUT=${OUT:-/tmp/out}
    run() { echo "$*"; }
else
    source "$(dirname "$0")/gpu_env.sh" || exit 1
    run() { "$@" || { echo "gpu_rows: failed: $*" >&2; exit 1; }; }
fi

reports=()
warm_up=1
for row in $rows; do
    merge=""
    for ((round = 0; round < rounds; round++)); do
        run env ENVIRONMENTS=own ROW="$row" TOOLS="${TOOLS:-ultralytics,replay}" ROUND="$round" \
            WARM_UP="$warm_up" MERGE="$merge" OUT="$OUT/speed-$round" bash tools/gpu_speed.sh
        warm_up=0
        merge="$OUT/speed-$round/$row/side_by_side.json"
    done
    reports+=("$merge")
done
# the step ratio's denominators: the nets and batches of the rows asked for (every net at every
# one of those batches)
models=() batches=()
for row in $rows; do
    case "$row" in
        segment-*) model=yolo26n-seg ;;
        *) model=yolo26n ;;
    esac
    batch=${row##*-b}
    [[ " ${models[*]} " == *" $model "* ]] || models+=("$model")
    [[ " ${batches[*]} " == *" $batch "* ]] || batches+=("$batch")
done
run python3 tools/bench_memory_format.py --models "${models[@]}" --batch "${batches[@]}" \
    --layouts channels_last+casts-together --rounds 5 --out "$OUT/graphed"
for row in $rows; do
    run env ENVIRONMENTS=own ROW="$row" EPOCHS=3 TOOLS=replay,native WARM_UP=0 OUT="$OUT/memory" \
        bash tools/gpu_speed.sh
    reports+=("$OUT/memory/$row/side_by_side.json")
done
if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "python3 tools/fit_readings.py ${reports[*]} > $OUT/rows.md"
else
    python3 tools/fit_readings.py "${reports[@]}" > "$OUT/rows.md" || exit 1
    cat "$OUT/rows.md" "$OUT/graphed/memory_format.json"
fi
