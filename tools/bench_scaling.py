"""Scaling: whole-fit images/s on 1 and N GPUs, native and replayed, through ``lucid-yolo fit``.

Each run is one ``lucid-yolo fit`` process (Lightning's own DDP launcher starts the other ranks
for ``--trainer.devices N``), timed from its start to its exit: data loading, the DDP set-up,
capture, every epoch's training and validation and the final line all count. Every rank keeps
the per-device batch, so N devices train the same epoch in 1/N of the steps at N times the
global batch (data-parallel weak scaling). "replay" is the network, loss and update on every
device count.

A short fit is mostly start-up (interpreter, CUDA, the second rank's launch, NCCL, data,
capture), so each run is also split by ``tools/bench_probe.py``: start-up (process start to the
first training batch) and the steady epochs (every epoch after the first, training and its
validation, images/s over the global epoch). Configurations alternate in rounds, the order
reversed every other round, while ``--budget`` seconds last: a round is only started for a fit
that the slowest run of its configuration says still fits. The JSON is rewritten after every
fit, so a cut run keeps what it measured. Per configuration: medians and ranges.

Example (2-GPU machine, from the repository root, about two minutes)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tools
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    python3 tools/bench_scaling.py --devices 1 2 --budget 140 \\
        --out $OUT/scaling.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from multi_gpu_env import multicast_off, run_group
from row_replay import TRAINING_REPLAY, replay_flags

multicast_off()

TOOLS_DIR = Path(__file__).resolve().parent
FIRST_FIT_GUESS_S = 40.0
"""Seconds a configuration's first fit is assumed to need before one has been timed."""

Config = tuple[int, bool]


def _fit(
    args: argparse.Namespace, yaml: Path, root: Path, config: Config, timeout: float
) -> dict[str, Any] | str:
    """One ``lucid-yolo fit`` in a fresh process: its probe record and wall seconds, or why it
    failed."""
    devices, replay = config
    probe = root.with_suffix(".json")
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
        f"--trainer.accelerator={args.accelerator}",
        f"--trainer.precision={args.precision}",
        "--trainer.callbacks+=bench_probe.FitProbe",
        *(replay_flags(TRAINING_REPLAY) if replay else ()),
    ]
    spawned = time.time()
    path = os.pathsep.join(filter(None, [str(TOOLS_DIR), os.environ.get("PYTHONPATH")]))
    env = {"LUCID_BENCH_PROBE": str(probe), "LUCID_BENCH_SPAWN": repr(spawned), "PYTHONPATH": path}
    done = run_group(
        command, timeout, extra_env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    wall = time.time() - spawned
    if done.returncode != 0 or "final:" not in done.stdout or not probe.is_file():
        return f"status {done.returncode} after {wall:.1f} s: {done.stderr[-1500:]}"
    record: dict[str, Any] = json.loads(probe.read_text())
    return {"wall_s": wall, **record}


def _measures(run: dict[str, Any]) -> dict[str, float]:
    """The numbers of one run: whole fit, start-up, steady epochs (global images/s)."""
    world = int(run.get("world_size", 1))
    images = run["train_images"] * world  # rank 0 counted its own shard
    epochs = [e["wall_s"] for e in run["epochs"]]
    steady = epochs[1:] or epochs
    per_epoch = images / max(len(epochs), 1)
    return {
        "wall_s": run["wall_s"],
        "whole_fit_img_per_s": images / run["wall_s"],
        "startup_s": run["startup_s"],
        "steady_epoch_s": statistics.median(steady),
        "steady_img_per_s": per_epoch / statistics.median(steady),
        "peak_reserved_gib": run["peak_reserved_gib"],
    }


def _summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = round(statistics.median(values), 2)
        out[f"{key}_range"] = [round(min(values), 2), round(max(values), 2)]
    return out


def _write(
    args: argparse.Namespace,
    configs: list[Config],
    measured: dict[Config, list[Any]],
    fails: list[str],
) -> list[dict[str, Any]]:
    rows = [
        {
            "devices": devices,
            "mode": "replay" if replay else "native",
            **_summary([_measures(r) for r in measured[(devices, replay)]]),
        }
        for devices, replay in configs
        if measured[(devices, replay)]
    ]
    result = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "rows": rows,
        "runs": {f"{d}-{'replay' if r else 'native'}": measured[(d, r)] for d, r in configs},
        "failures": fails,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("scaling.json"))
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--val", type=int, default=64, help="validation images")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=16, help="per-device batch")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--accelerator", default="gpu", help="cpu: a smoke run of the tool")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--rounds", type=int, default=3, help="at most this many per config")
    parser.add_argument(
        "--budget", type=float, default=600.0, help="seconds for everything, data included"
    )
    args = parser.parse_args()
    begin = time.perf_counter()
    from lucid_yolo.train.data.synthetic import generate_synthetic

    configs = list(itertools.product(args.devices, (False, True)))
    measured: dict[Config, list[Any]] = {c: [] for c in configs}
    slowest: dict[Config, float] = {}
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
        print(f"data ready at {time.perf_counter() - begin:.1f} s", flush=True)
        for round_ in range(args.rounds):
            # alternate the order so no configuration always runs first or on a warm machine
            for config in configs if round_ % 2 == 0 else configs[::-1]:
                left = args.budget - (time.perf_counter() - begin)
                need = slowest.get(config, FIRST_FIT_GUESS_S)
                if left < need:
                    print(f"{config}: {left:.0f} s left, a fit needs ~{need:.0f}: skipped")
                    continue
                root = Path(tmp) / f"run-{config[0]}-{int(config[1])}-{round_}"
                took = _fit(args, yaml, root, config, timeout=left)
                name = f"{config[0]} device(s), {'replay' if config[1] else 'native'}"
                if isinstance(took, str):
                    failures.append(f"{name}: {took}")
                    print(failures[-1], flush=True)
                    slowest[config] = float("inf")
                else:
                    measured[config].append(took)
                    slowest[config] = max(slowest.get(config, 0.0), took["wall_s"])
                    print(f"{name}: {json.dumps(_measures(took))}", flush=True)
                _write(args, configs, measured, failures)
    rows = _write(args, configs, measured, failures)
    for row in rows:
        print(json.dumps(row), flush=True)
    print(f"done in {time.perf_counter() - begin:.1f} s", flush=True)
    return 1 if failures or not rows else 0


if __name__ == "__main__":
    raise SystemExit(main())
