"""Where a training sample's CPU time goes, stage by stage (the loader's cost per image).

Builds a synthetic set, fills the RAM cache (so decoding is out of the picture, as in a cached fit),
then builds ``--samples`` training samples in this process under :mod:`cProfile` and reports the
cumulative CPU milliseconds per sample of each pipeline stage. CPU time, not wall time, so a busy
machine changes the numbers little. Then it collates those samples into batches of ``--batch`` and
reports the CPU milliseconds per batch of :func:`collate` (which runs in the workers too).
``--pixels-on-device`` profiles what the workers of a CUDA fit do: HSV and the flip's pixels left
to the device (their device cost: ``tools/bench_data_wait.py --device-only``).

Run (repository root)::

    uv run python tools/profile_augment.py --task detect --imgsz 640 --samples 200
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from lucid_yolo.train.data.augment import AugmentConfig
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.data.synthetic import generate_synthetic

STAGES = {
    "whole sample (__getitem__)": ("dataset.py", "__getitem__"),
    "load (cache hit or decode)": ("dataset.py", "load"),
    "mosaic4": ("mosaic.py", "mosaic4"),
    "letterbox": ("letterbox.py", "letterbox"),
    "copy_paste": ("mix.py", "copy_paste"),
    "random_affine": ("affine.py", "random_affine"),
    "mixup": ("mix.py", "mixup"),
    "hsv_cpu": ("hsv.py", "hsv_cpu"),
    "flip_lr": ("flip.py", "flip_lr"),
    "to_targets": ("targets.py", "to_targets"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="detect", choices=["detect", "segment", "pose", "obb"])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--pixels-on-device", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="profile-augment-"))
    data = generate_synthetic(
        root, task=args.task, num_train=args.images, num_val=1, imgsz=args.imgsz
    )
    dm = YoloDataModule(
        data,
        task=args.task,
        imgsz=args.imgsz,
        workers=0,
        cache=True,
        augment=AugmentConfig(pixels_on_device=args.pixels_on_device),
    )
    dm.setup("fit")
    dataset = dm.datasets["train"]
    dataset.defer_pixels = args.pixels_on_device
    profile = cProfile.Profile(time.process_time)
    start = time.process_time()
    profile.enable()
    samples = [dataset[i % len(dataset)] for i in range(args.samples)]
    profile.disable()
    total_ms = (time.process_time() - start) * 1000 / args.samples
    batches = [
        samples[i : i + args.batch] for i in range(0, len(samples) - args.batch + 1, args.batch)
    ]
    start = time.process_time()
    for batch in batches:
        collate(batch)
    collate_ms = (time.process_time() - start) * 1000 / len(batches)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    print(
        f"{args.task}, {args.imgsz} px, cached, pixels_on_device={args.pixels_on_device}, "
        f"{args.samples} samples: {total_ms:.1f} ms CPU each; "
        f"collate of {args.batch}: {collate_ms:.2f} ms CPU per batch"
    )
    print("| stage | cumulative ms per sample | share |\n|---|---|---|")
    for name, (file, func) in STAGES.items():
        cumulative = sum(
            value[3] for (path, _, fn), value in stats.items() if path.endswith(file) and fn == func
        )
        ms = cumulative * 1000 / args.samples
        print(f"| {name} | {ms:.2f} | {ms / total_ms:.0%} |")


if __name__ == "__main__":
    main()
