"""Scaling: whole-fit images/s on 1 and N GPUs, native and replayed, through ``lucid-yolo fit``.

Each run is one ``lucid-yolo fit`` process (Lightning's own DDP launcher starts the other ranks
for ``--trainer.devices N``), timed from its start to its exit: data loading, the DDP set-up,
capture, every epoch's training and validation and the final line all count. Every rank keeps
the per-device batch, so N devices train the same epoch in 1/N of the steps at N times the
global batch (data-parallel weak scaling). Runs alternate between the configurations; reported
per configuration: median and range of wall seconds and images/s (training images x epochs /
wall seconds). "replay" is the network, loss and update on every device count.

Example (2-GPU machine, from the repository root)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    NCCL_NVLS_ENABLE=0 python3 tools/bench_scaling.py --devices 1 2 --out $OUT/scaling.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from multi_gpu_env import multicast_off, run_group

multicast_off()

REPLAY_FLAGS = (
    "--model.replay.network=true",
    "--model.replay.loss=true",
    "--model.replay.update=true",
)
"""Replay: the network, the loss and the update."""


def _fit(
    args: argparse.Namespace, yaml: Path, root: Path, devices: int, replay: bool
) -> float | str:
    """Wall seconds of one ``lucid-yolo fit``, or why it failed."""
    command = [
        sys.executable,
        "-m",
        "lucid_yolo.cli",
        "fit",
        f"--data.yaml={yaml}",
        f"--data.imgsz={args.imgsz}",
        f"--data.batch_size={args.batch}",
        f"--trainer.max_epochs={args.epochs}",
        f"--trainer.devices={devices}",
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        "--trainer.precision=bf16-mixed",
        *(REPLAY_FLAGS if replay else ()),
    ]
    begin = time.perf_counter()
    done = run_group(command, args.timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - begin
    if done.returncode != 0 or "final:" not in done.stdout:
        return f"status {done.returncode}: {done.stderr[-2000:]}"
    return seconds


def _summary(seconds: list[float], images: int) -> dict[str, Any]:
    rates = [images / s for s in seconds]
    return {
        "runs": len(seconds),
        "wall_s_median": round(statistics.median(seconds), 2),
        "wall_s_range": [round(min(seconds), 2), round(max(seconds), 2)],
        "images_per_s_median": round(statistics.median(rates), 1),
        "images_per_s_range": [round(min(rates), 1), round(max(rates), 1)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("scaling.json"))
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--val", type=int, default=128, help="validation images")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16, help="per-device batch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per fit")
    args = parser.parse_args()
    from lucid_yolo.train.data.synthetic import generate_synthetic

    configs = list(itertools.product(args.devices, (False, True)))
    seconds: dict[tuple[int, bool], list[float]] = {c: [] for c in configs}
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        yaml = generate_synthetic(
            Path(tmp) / "data",
            task="detect",
            num_train=args.images,
            num_val=args.val,
            imgsz=args.imgsz,
            seed=0,
        )
        for repeat in range(args.repeats):
            # alternate the order so no configuration always runs on a cold machine
            for devices, replay in configs if repeat % 2 == 0 else configs[::-1]:
                root = Path(tmp) / f"runs-{devices}-{replay}-{repeat}"
                took = _fit(args, yaml, root, devices, replay)
                mode = "replay" if replay else "native"
                if isinstance(took, str):
                    failures.append(f"{devices} device(s), {mode}: {took}")
                    print(failures[-1], flush=True)
                    continue
                seconds[(devices, replay)].append(took)
                print(f"{devices} device(s), {mode}: {took:.1f} s", flush=True)
    rows = [
        {
            "devices": devices,
            "mode": "replay" if replay else "native",
            **_summary(seconds[(devices, replay)], args.images * args.epochs),
        }
        for devices, replay in configs
        if seconds[(devices, replay)]
    ]
    result = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "rows": rows,
        "failures": failures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    for row in rows:
        print(json.dumps(row), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
