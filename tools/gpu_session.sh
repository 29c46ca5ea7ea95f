#!/usr/bin/env bash
# One device-machine session: every `gpu` test (GPU_WORKERS processes sharing the GPU, as
# `make test-gpu`), then the training gates. Logs go to $OUT.
# Usage (on the GPU machine, from the repository root): bash tools/gpu_session.sh [gates...]
set -u
source "$(dirname "$0")/gpu_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c 'import torch, lightning; print("torch", torch.__version__, "lightning", lightning.__version__)' | tee -a "$OUT/device.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -p no:cacheprovider -p no:benchmark -m gpu -q -rf \
        -n "${GPU_WORKERS:-6}" --dist worksteal --continue-on-collection-errors \
        --ignore=tests/train/metrics/test_faster_coco_eval_parity.py \
        --junitxml="$OUT/gpu_tests.xml" ${TEST_ARGS:-tests} 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
fi
for gate in "$@"; do
    # gate = task:images:epochs[:overfit]
    IFS=: read -r task images epochs mode <<<"$gate"
    echo "== gate $gate"
    flag=""; [ "$mode" = overfit ] && flag="--overfit"
    timeout "${GATE_TIMEOUT:-200}" python3 tools/train_gate.py --task "$task" --images "$images" \
        --epochs "$epochs" $flag --out "$OUT/gate_${task}_${images}.json" 2>&1 \
        | grep -E '^\{|SUMMARY|Error|error' | tail -12
done
