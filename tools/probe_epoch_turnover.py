"""Epoch turnover: how long each epoch's first step waits for its batch, streamed or not.

Issue 11 asks that the first batches of epoch N+1 be ready when epoch N ends. Two loaders read the
same synthetic set with the same workers. The first is the training loader `lucid-yolo fit` uses
(:class:`ResumableLoader`, which with workers streams batches across epochs). The second is a
plain DataLoader with persistent workers over the same sampler, which is what the training loader
was before: each epoch starts loading at its own ``iter()``. Each epoch takes the loader's batches
with ``--step-ms`` of sleep after each one (the training step on the accelerator), then sleeps
``--validation-ms`` (the validation). No model runs, so the numbers are the data path's alone.

Writes ``$OUT/epoch_turnover.json``: per loader and epoch, the wait for the first batch and the
median wait for the others (ms). Epoch 0 includes starting the workers.

Command (on the GPU machine, from the repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) OUT=${OUT:-out} \\
        python tools/probe_epoch_turnover.py --images 256 --imgsz 640 --batch 16 --workers 4

On a CPU, to check the script: ``--images 12 --imgsz 64 --batch 4 --workers 1 --epochs 2
--step-ms 0 --validation-ms 0``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from lucid_yolo.train import YoloDataModule
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.resumable_loader import ResumableLoader
from lucid_yolo.train.data.sampler import EpochSampler
from lucid_yolo.train.data.synthetic import generate_synthetic


def per_epoch_loader(streamed: ResumableLoader) -> DataLoader[Any]:
    """The loader as it was: persistent workers, each epoch loaded from its own ``iter()``."""
    sampler = streamed.epoch_sampler
    return DataLoader(
        streamed.dataset,
        batch_size=streamed.batch_size,
        sampler=EpochSampler(len(sampler), seed=sampler.seed),
        num_workers=streamed.num_workers,
        collate_fn=collate,
        persistent_workers=True,
        drop_last=streamed.drop_last,
        generator=torch.Generator().manual_seed(sampler.seed),
    )


def waits(batches: Iterable[Any], step_s: float) -> list[float]:
    """Milliseconds each batch of one epoch was waited for, sleeping ``step_s`` after each."""
    out: list[float] = []
    iterator = iter(batches)
    while True:
        start = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            return out
        out.append((time.perf_counter() - start) * 1e3)
        time.sleep(step_s)


def measure(loader: DataLoader[Any], epochs: int, step_s: float, validation_s: float) -> list[Any]:
    """Per epoch: the first batch's wait and the median of the others (ms)."""
    rows = []
    sampler = loader.sampler
    assert isinstance(sampler, EpochSampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        epoch_waits = waits(loader, step_s)
        rest = epoch_waits[1:] or [0.0]
        rows.append(
            {
                "epoch": epoch,
                "batches": len(epoch_waits),
                "first_ms": round(epoch_waits[0], 2),
                "median_other_ms": round(statistics.median(rest), 2),
            }
        )
        time.sleep(validation_s)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--step-ms", type=float, default=30.0)
    parser.add_argument("--validation-ms", type=float, default=1500.0)
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as root:
        yaml = generate_synthetic(
            Path(root), num_train=args.images, num_val=2, imgsz=args.imgsz, seed=0
        )
        data = YoloDataModule(
            yaml, imgsz=args.imgsz, batch_size=args.batch, workers=args.workers, seed=0
        )
        data.setup("fit")
        streamed = data.train_dataloader()
        assert isinstance(streamed, ResumableLoader)
        step_s, validation_s = args.step_ms / 1e3, args.validation_ms / 1e3
        result = {
            "args": vars(args),
            "streamed": measure(streamed, args.epochs, step_s, validation_s),
            "per_epoch": measure(per_epoch_loader(streamed), args.epochs, step_s, validation_s),
        }
    (out / "epoch_turnover.json").write_text(json.dumps(result, indent=1))
    for name in ("streamed", "per_epoch"):
        for row in result[name]:
            print(name, row)


if __name__ == "__main__":
    main()
