#!/usr/bin/env bash
# Downloads, into .whl/, the wheels the GPU machine lacks (its image has torch, lightning, opencv,
# numpy, pytest, onnxruntime): the CLI's jsonargparse and what its signatures need, the metric
# cross-check's faster-coco-eval, and Ultralytics, the benchmark peer (never a dependency of any
# package), with those of its needs that the image lacks and a fit reaches (thop; polars, which
# reads its results, and polars' runtime; not ultralytics-platform, which it imports only when its
# platform classes are asked for). Versions are uv.lock's where it has them.
# Run once a session, here (the dev machine), from the repository root; then name .whl in the
# device call's carry and start its command with `source tools/gpu_env.sh`, which installs them.
# .git/info/exclude should list /.whl/ so the wheels never reach a commit.
set -euo pipefail
cd "$(dirname "$0")/.."
locked() { grep -A1 "^name = \"$1\"$" uv.lock | sed -n 's/^version = "\(.*\)"$/\1/p'; }
wheels=(
    "jsonargparse==$(locked jsonargparse)"
    "docstring-parser==$(locked docstring-parser)"
    "typeshed-client==$(locked typeshed-client)"
    "faster-coco-eval==$(locked faster-coco-eval)"
    "ultralytics==${ULTRALYTICS_VERSION:-8.4.190}"
    "ultralytics-thop==2.2.3"
    "polars==1.35.2"
    "polars-runtime-32==1.35.2"
)
mkdir -p .whl
for wheel in "${wheels[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$wheel"
done
du -sh .whl
