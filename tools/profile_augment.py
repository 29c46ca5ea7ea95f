"""Where a training sample's CPU time goes, stage by stage (the loader's cost per image).

Builds a synthetic set, fills the RAM cache (so decoding is out of the picture, as in a cached fit),
then builds ``--samples`` training samples in this process under :mod:`cProfile` and reports the
cumulative CPU milliseconds per sample of each pipeline stage. CPU time, not wall time, so a busy
machine changes the numbers little.

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
    "collate": ("collate.py", "collate"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="detect", choices=["detect", "segment", "pose", "obb"])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="profile-augment-"))
    data = generate_synthetic(
        root, task=args.task, num_train=args.images, num_val=1, imgsz=args.imgsz
    )
    dm = YoloDataModule(data, task=args.task, imgsz=args.imgsz, workers=0, cache=True)
    dm.setup("fit")
    dataset = dm.datasets["train"]
    profile = cProfile.Profile(time.process_time)
    start = time.process_time()
    profile.enable()
    for i in range(args.samples):
        dataset[i % len(dataset)]
    profile.disable()
    total_ms = (time.process_time() - start) * 1000 / args.samples
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    print(
        f"{args.task}, {args.imgsz} px, cached, {args.samples} samples: {total_ms:.1f} ms CPU each"
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
