#!/usr/bin/env bash
# The `lucid-yolo` command line on the GPU machine, from source: quickstart fit native and with
# network replay (deterministic, then their checkpoints compared byte for byte), validate (eagerly
# and with the evaluation forward replayed: the metric tables compared),
# predict, export, info, and a segment fit with chained replay regions. Logs go to $OUT.
# Usage (repository root): bash tools/gpu_cli.sh
set -u
source "$(dirname "$0")/gpu_env.sh" || exit 1
export XDG_CACHE_HOME=/tmp/cache
RUNS=/tmp/cli-runs
mkdir -p "$RUNS"
cli() { timeout "${CLI_TIMEOUT:-240}" python3 -m lucid_yolo.cli "$@"; }
step() { echo "== $*"; }
ckpt() { ls "$RUNS/$1"/detect/fit1/checkpoints/"$2".ckpt; }

step fit quickstart, native, deterministic
cli fit --config quickstart --trainer.default_root_dir "$RUNS/native" --trainer.deterministic true \
    --trainer.enable_progress_bar false 2>&1 | tail -n 16
step fit quickstart, network replay, deterministic
cli fit --config quickstart --trainer.default_root_dir "$RUNS/replay" \
    --trainer.deterministic true --trainer.enable_progress_bar false \
    --model.replay.network true 2>&1 | tail -n 16
step native and replay checkpoints
python3 - "$(ckpt native last)" "$(ckpt replay last)" <<'EOF'
import sys, torch
from lucid_yolo.replay import first_difference, state_digest
native, replay = (torch.load(p, map_location="cpu", weights_only=True) for p in sys.argv[1:])
for key in ("state_dict", "optimizer_states", "lr_schedulers", "loops"):
    a, b = state_digest(native[key]), state_digest(replay[key])
    diff = first_difference(a, b)
    print(f"{key}: {len(a)} entries, {'EQUAL' if diff is None else 'first difference: ' + diff}")
EOF
step validate the best checkpoint of the replay run, eagerly and with the evaluation replayed
cli validate --config quickstart --ckpt_path "$(ckpt replay best)" --trainer.deterministic true \
    --trainer.default_root_dir "$RUNS/validate" --trainer.enable_progress_bar false \
    > "$RUNS/validate_eager.log" 2>&1; tail -n 12 "$RUNS/validate_eager.log"
cli validate --config quickstart --ckpt_path "$(ckpt replay best)" --trainer.deterministic true \
    --trainer.default_root_dir "$RUNS/validate" --trainer.enable_progress_bar false \
    --model.replay.evaluation true > "$RUNS/validate_replayed.log" 2>&1
tail -n 12 "$RUNS/validate_replayed.log"
grep '│' "$RUNS/validate_eager.log" > "$RUNS/table_eager.txt"
grep '│' "$RUNS/validate_replayed.log" > "$RUNS/table_replayed.txt"
if [ -s "$RUNS/table_eager.txt" ] && cmp -s "$RUNS/table_eager.txt" "$RUNS/table_replayed.txt"; then
    echo "validation tables: EQUAL"
else
    echo "validation tables: DIFFER (or missing)"
fi
step predict
cli predict --ckpt_path "$(ckpt replay best)" --data.source "$XDG_CACHE_HOME"/lucid-yolo/synthetic-detect-v*/images/val \
    --output.dir "$RUNS/predict" --output.draw true --trainer.enable_progress_bar false 2>&1 | tail -n 4
first=$(ls "$RUNS/predict"/*.json | head -n 1)
cp "$first" "$OUT/predict_first.json"
cp "${first%.json}.png" "$OUT/predict_first.png"
step export
cli export --ckpt_path "$(ckpt replay best)" --format onnx --out "$RUNS/model.onnx" 2>&1 | tail -n 3
step info
cli info yolo26n-seg 2>&1 | tail -n 4
step fit segment-n, network + segment-head replay, 2 short epochs
cli fit --config segment-n --model.replay.network true --model.replay.segment_heads true \
    --trainer.max_epochs 2 --data.imgsz 320 --data.batch_size 8 \
    --trainer.default_root_dir "$RUNS/segment" --trainer.enable_progress_bar false 2>&1 | tail -n 16
