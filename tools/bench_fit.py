"""Native vs replay training speed and memory, as alternating pairs of whole fits.

Each pair runs one native fit and one fit with the network region (with ``--loss`` also the loss,
with ``--update`` the MuSGD update and EMA blend) replayed from CUDA graphs, same seed and data,
in alternating order.
Reported per mode: median and range of the whole-fit wall time, of the steady-state step time
(last half of the steps, host time between batch ends after a device sync at both ends of the
window), and peak reserved CUDA memory. Validation is off: this measures the training step.

Example (GPU machine, from source)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/bench_fit.py --batch 4 --pairs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from bench_trainer import step_trainer
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.memory_format import MEMORY_FORMATS


class _StepClock(Callback):
    def __init__(self, window_start: int) -> None:
        self.window_start = window_start
        self.start = 0.0
        self.end = 0.0
        self.steps = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *_: Any) -> None:
        if trainer.global_step == self.window_start:
            torch.cuda.synchronize()
            self.start = time.perf_counter()
        elif trainer.global_step > self.window_start:
            self.steps += 1

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        torch.cuda.synchronize()
        self.end = time.perf_counter()


def _fit(data_yaml: Path, args: argparse.Namespace, replay: bool) -> dict[str, float]:
    pl.seed_everything(0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    begin = time.perf_counter()
    data = YoloDataModule(
        data_yaml, task="detect", imgsz=args.imgsz, batch_size=args.batch, workers=args.workers
    )
    module = YoloModule(
        "yolo26n",
        num_classes=data.num_classes,
        replay=ReplayConfig(
            network=replay, update=replay and args.update, loss=replay and args.loss
        ),
        memory_format=args.memory_format,
    )
    clock = _StepClock(args.steps // 2)
    trainer = step_trainer(args.steps, clock)
    trainer.fit(module, data)
    whole = time.perf_counter() - begin
    step_ms = (clock.end - clock.start) * 1000.0 / max(clock.steps, 1)
    return {
        "whole_s": whole,
        "step_ms": step_ms,
        "img_s": args.batch * 1000.0 / step_ms,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
        "replays": float(module.replay_telemetry.replays),
    }


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    return {
        key: {
            "median": round(statistics.median(r[key] for r in rows), 3),
            "min": round(min(r[key] for r in rows), 3),
            "max": round(max(r[key] for r in rows), 3),
        }
        for key in rows[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-bench"))
    parser.add_argument("--update", action="store_true", help="replay the update and EMA too")
    parser.add_argument("--loss", action="store_true", help="replay the loss too")
    parser.add_argument(
        "--memory-format",
        choices=MEMORY_FORMATS,
        default="auto",
        help="the module's layout (auto: channels_last on CUDA)",
    )
    args = parser.parse_args()
    data_yaml = generate_synthetic(
        args.root, task="detect", num_train=args.images, num_val=0, imgsz=args.imgsz, seed=0
    )
    results: dict[str, list[dict[str, float]]] = {"native": [], "replay": []}
    for pair in range(args.pairs):
        order = ("native", "replay") if pair % 2 == 0 else ("replay", "native")
        for mode in order:
            row = _fit(data_yaml, args, replay=mode == "replay")
            results[mode].append(row)
            print(json.dumps({"pair": pair, "mode": mode, **row}), flush=True)
    summary = {mode: _summary(rows) for mode, rows in results.items()}
    native, replay = summary["native"]["step_ms"]["median"], summary["replay"]["step_ms"]["median"]
    summary["speedup_step"] = round(native / replay, 3)
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
