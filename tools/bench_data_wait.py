"""Data wait of a replayed detect fit, with the pixel passes on the device or in the workers.

One fit per process (validation off, network + loss + update replayed, bf16, the data module's
defaults: RAM cache, workers from the CPU count). Per training step of the second half of the fit
it records, on the host:

* ``data_ms``: from one step's end to the next step's start, what ``PhaseTimer`` calls data wait
  (the loader, Lightning's own work between steps, the copy to the device being issued and, with
  ``pixels_on_device``, the HSV and flip kernels being issued);
* ``loader_ms``: the part of it spent blocked in the training loader's ``next()``, i.e. waiting
  for the workers (the rest is main-process work the workers cannot hide);
* ``step_ms``: step period, steady state (batch end to batch end, device synchronised at both
  ends of the window).

With ``--device-only`` it instead times the device pass alone (CUDA events, median of 50): building
:class:`~lucid_yolo.train.data.augment.HsvTables`, and :class:`DevicePixels` on a 640 px batch,
eagerly or, with ``--replay-pixels``, replayed from its CUDA graph (the fit follows its replay
options: the pixel work replays when the fit records graphs).

Run (GPU machine, from source; one JSON line on stdout, and into ``--out``)::

    python3 tools/bench_data_wait.py --pixels-on-device true --steps 96 --out $OUT/on.json
    python3 tools/bench_data_wait.py --device-only --out $OUT/device.json

On a machine without CUDA the fit runs on the CPU (a smoke test: ``--imgsz 64 --steps 8``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from bench_trainer import step_trainer
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.augment import AugmentConfig, DevicePixels, HsvTables
from lucid_yolo.train.data.augment.device_pixels import CHUNK_PIXELS
from lucid_yolo.train.data.resumable_loader import ResumableLoader
from lucid_yolo.train.data.synthetic import generate_synthetic

LOADER_WAITS: list[float] = []


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed_iter(iterate: Any) -> Any:
    """``ResumableLoader.__iter__`` that records how long each ``next()`` blocks."""

    def timed(self: ResumableLoader) -> Iterator[Any]:
        batches = iterate(self)
        while True:
            start = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                return
            LOADER_WAITS.append((time.perf_counter() - start) * 1000.0)
            yield batch

    return timed


class _StepWaits(Callback):
    def __init__(self, window_start: int) -> None:
        self.window_start = window_start
        self.last_end: float | None = None
        self.data_ms: list[float] = []
        self.loader_ms: list[float] = []
        self.start = self.end = 0.0
        self.steps = 0

    def on_train_batch_start(self, trainer: Any, *_: Any) -> None:
        if self.last_end is not None and trainer.global_step >= self.window_start:
            self.data_ms.append((time.perf_counter() - self.last_end) * 1000.0)
            self.loader_ms.append(LOADER_WAITS[-1])

    def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
        if trainer.global_step == self.window_start:
            _synchronize()
            self.start = time.perf_counter()
        elif trainer.global_step > self.window_start:
            self.steps += 1
            if trainer.global_step == trainer.max_steps:
                _synchronize()
                self.end = time.perf_counter()
        self.last_end = time.perf_counter()

    def on_train_epoch_start(self, *_: Any) -> None:
        self.last_end = None  # an epoch's first wait includes the previous epoch's end


def _fit(args: argparse.Namespace) -> dict[str, Any]:
    data_yaml = args.root / "data.yaml"
    if not data_yaml.is_file():  # the same seed gives the same set: later fits reuse it
        generate_synthetic(
            args.root, task="detect", num_train=args.images, num_val=16, imgsz=args.imgsz, seed=0
        )
    ResumableLoader.__iter__ = _timed_iter(ResumableLoader.__iter__)  # type: ignore[method-assign]
    pl.seed_everything(0)
    data = YoloDataModule(
        data_yaml,
        task="detect",
        imgsz=args.imgsz,
        batch_size=args.batch,
        augment=AugmentConfig(pixels_on_device=args.pixels_on_device == "true"),
    )
    module = YoloModule(
        "yolo26n",
        num_classes=data.num_classes,
        replay=ReplayConfig(network=True, loss=True, update=True),
    )
    waits = _StepWaits(args.steps // 2)
    trainer = step_trainer(args.steps, waits, accelerator="auto")
    trainer.fit(module, data)
    return {
        "pixels_on_device": args.pixels_on_device,
        "defer_pixels": data.datasets["train"].defer_pixels,
        "device": str(module.device),
        "workers": data.workers,
        "batch": args.batch,
        "steps_timed": waits.steps,
        "step_ms": (waits.end - waits.start) * 1000.0 / max(waits.steps, 1),
        "data_ms_median": statistics.median(waits.data_ms),
        "data_ms_mean": statistics.fmean(waits.data_ms),
        "loader_ms_median": statistics.median(waits.loader_ms),
        "loader_ms_mean": statistics.fmean(waits.loader_ms),
        "replays": int(module.replay_telemetry.replays),
    }


def _device_only(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device("cuda")
    start = time.perf_counter()
    HsvTables.on(device)
    torch.cuda.synchronize()
    tables_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    batch = {
        "images": torch.randint(0, 256, (args.batch, 3, 640, 640), dtype=torch.uint8),
        "deferred_hsv": torch.from_numpy(rng.uniform(0.6, 1.4, (args.batch, 3))),
        "deferred_flip": torch.from_numpy(rng.random(args.batch) < 0.5),
    }
    pinned = {key: value.pin_memory() for key, value in batch.items()}
    pixels = DevicePixels(args.chunk_pixels, replay=args.replay_pixels)
    times: dict[str, list[float]] = {
        "copy_ms": [],
        "device_pixels_ms": [],
        "device_pixels_host_ms": [],
        "pin_ms": [],
    }
    for _ in range(55):
        host = time.perf_counter()
        batch["images"].pin_memory()
        times["pin_ms"].append((time.perf_counter() - host) * 1000.0)
        marks = [
            torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            for _ in range(3)
        ]
        marks[0].record()
        moved = {key: value.to(device, non_blocking=True) for key, value in pinned.items()}
        marks[1].record()
        host = time.perf_counter()
        pixels(moved)  # type: ignore[arg-type]
        times["device_pixels_host_ms"].append((time.perf_counter() - host) * 1000.0)
        marks[2].record()
        torch.cuda.synchronize()
        times["copy_ms"].append(marks[0].elapsed_time(marks[1]))
        times["device_pixels_ms"].append(marks[1].elapsed_time(marks[2]))
    return {
        "batch": args.batch,
        "chunk_pixels": args.chunk_pixels,
        "replay_pixels": args.replay_pixels,
        "tables_build_s": tables_s,
        **{key: statistics.median(values[5:]) for key, values in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pixels-on-device", choices=["true", "false"], default="true")
    parser.add_argument("--device-only", action="store_true")
    parser.add_argument("--replay-pixels", action="store_true", help="with --device-only")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument(
        "--chunk-pixels",
        type=int,
        default=CHUNK_PIXELS,
        help="with --device-only: pixels DevicePixels finishes at once",
    )
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-data-wait"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    row = _device_only(args) if args.device_only else _fit(args)
    line = json.dumps({key: round(v, 3) if isinstance(v, float) else v for key, v in row.items()})
    print(line, flush=True)
    if args.out is not None:
        args.out.write_text(line + "\n")


if __name__ == "__main__":
    main()
