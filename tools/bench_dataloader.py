"""Dataloader throughput: training images/s at 640 px per worker count, on the synthetic set.

Run (from the repository root)::

    uv run python tools/bench_dataloader.py --workers 0 1 2 --images 64 --repeats 3

For each worker count it builds a :class:`~lucid_yolo.train.data.datamodule.YoloDataModule` over a
freshly generated synthetic detection set, runs one warm-up epoch (worker start-up, first decode),
then times ``--repeats`` whole training epochs (full default augmentation: mosaic, affine, HSV,
flip; persistent workers) and reports the median and range, plus the main process's CPU time
per image (with ``--workers 0`` that is the whole pipeline's cost, a figure that a busy machine
does not distort the way it distorts wall-clock rates). ``--cache`` uses the RAM cache;
``--pixels-on-device`` leaves HSV and the flip's pixels undone, as the workers of a CUDA fit do
(:mod:`lucid_yolo.train.data.augment.device_pixels`), so the rate is what they supply there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lucid_yolo.train.data.augment import AugmentConfig
from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.data.sampler import EpochSampler
from lucid_yolo.train.data.synthetic import generate_synthetic


def _epoch_rates(dm: YoloDataModule, repeats: int) -> tuple[list[float], float]:
    """Images/s of ``repeats`` whole training epochs after one warm-up epoch, and the main
    process's CPU milliseconds per image (the whole pipeline's cost when ``workers=0``)."""
    loader = dm.train_dataloader()
    sampler = loader.sampler
    assert isinstance(sampler, EpochSampler)
    rates = []
    cpu = 0.0
    images = 0
    for epoch in range(repeats + 1):
        sampler.set_epoch(epoch)
        start, start_cpu = time.perf_counter(), time.process_time()
        seen = sum(batch["images"].shape[0] for batch in loader)
        if epoch:
            rates.append(seen / (time.perf_counter() - start))
            cpu += time.process_time() - start_cpu
            images += seen
    return rates, 1000 * cpu / images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--images", type=int, default=64, help="synthetic training images")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="epochs; the median is reported")
    parser.add_argument("--task", default="detect", choices=["detect", "segment", "pose", "obb"])
    parser.add_argument("--cache", action="store_true", help="decode once into the RAM cache")
    parser.add_argument(
        "--pixels-on-device", action="store_true", help="leave HSV and flip pixels undone"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = generate_synthetic(
            Path(tmp), task=args.task, num_train=args.images, num_val=4, imgsz=args.imgsz
        )
        print(
            f"# {args.task}, {args.imgsz} px, batch {args.batch_size}, cache={args.cache}, "
            f"pixels_on_device={args.pixels_on_device}, "
            f"{os.cpu_count()} CPUs, torch {torch.__version__}"
        )
        print("| workers | images/s (median) | range | main-process CPU ms/image |")
        print("|---|---|---|---|")
        for workers in args.workers:
            dm = YoloDataModule(
                data,
                task=args.task,
                imgsz=args.imgsz,
                batch_size=args.batch_size,
                workers=workers,
                augment=AugmentConfig(pixels_on_device=args.pixels_on_device),
                cache=args.cache,
                max_instances=64,
            )
            dm.setup("fit")
            rates, cpu_ms = _epoch_rates(dm, args.repeats)
            print(
                f"| {workers} | {statistics.median(rates):.1f} | "
                f"{min(rates):.1f}-{max(rates):.1f} | {cpu_ms:.1f} |"
            )


if __name__ == "__main__":
    main()
