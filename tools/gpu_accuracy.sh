#!/usr/bin/env bash
# Issue 13's accuracy side by side in one call of under 590 s: the four tasks through Ultralytics
# and lucid-yolo (every replay region on: bitwise equal to native, and quicker), all eight fits at
# once, 320 px, batch 16, 30 epochs, 512/128 synthetic images. On two GPUs Ultralytics runs on the
# first and lucid-yolo on the second; on one GPU all eight share it (16 cores were enough at
# 2 loader workers a fit). Fits still running at FIT_TIMEOUT (545 s) are cut and keep their
# finished epochs. Three small files come back: $OUT/acc/side_by_side.{md,json,svg}.
# NOCLIP=1 adds lucid-yolo without the gradient clip (--model.grad_clip_norm 0) beside them.
# Usage (repository root, `.whl` carried; tools/gpu_env.sh, sourced below, installs it):
#   OUT=... bash tools/gpu_accuracy.sh
set -u
source "$(dirname "$0")/gpu_env.sh" || exit 1
common=(--accuracy --tasks detect,segment,pose,obb --imgsz 320 --batch 16 --epochs 30
        --images 512 --val-images 128 --workers 2 --timeout "${FIT_TIMEOUT:-545}")
python3 tools/bench_side_by_side.py "${common[@]}" --tools ultralytics,replay \
    --runs-dir /tmp/acc-runs --data-root /tmp/acc-data --out "$OUT/acc" > /tmp/acc.log 2>&1 &
runs=(acc)
if [ "${NOCLIP:-0}" != 0 ]; then
    python3 tools/bench_side_by_side.py "${common[@]}" --tools native \
        --lucid-args "--model.grad_clip_norm 0" --runs-dir /tmp/acc-runs-noclip \
        --data-root /tmp/acc-data-noclip --out "$OUT/acc-noclip" > /tmp/acc-noclip.log 2>&1 &
    runs+=(acc-noclip)
fi
wait
for run in "${runs[@]}"; do
    echo "== $run"
    cat "$OUT/$run/side_by_side.md" 2>/dev/null || tail -n 20 "/tmp/$run.log"
done
