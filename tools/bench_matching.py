"""Host time of COCO's greedy matching per validation pass, on overlaps shaped like a real one.

Validation matches each image's kept predictions (up to ``max_dets``, 300, at the 0.001
confidence cut) to its targets. How long that takes depends on how many of them overlap a
target at IoU 0.5 or more (few for a fresh network, tens per target once trained), so this
times :func:`lucid_yolo.train.metrics.match_images` one image at a time, as the evaluator calls
it, for several shares of overlapping predictions.

Command (any machine, from the repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/bench_matching.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lucid_yolo.train.metrics import ImageOverlaps, match_images


def image_overlaps(
    rng: np.random.Generator, dets: int, targets: int, share: float
) -> ImageOverlaps:
    """``dets`` predictions in score order; ``share`` of them overlap one target at 0.5-1.0."""
    overlaps = rng.uniform(0.0, 0.45, (dets, targets))
    hits = rng.random(dets) < share
    overlaps[hits, rng.integers(0, targets, hits.sum())] = rng.uniform(0.5, 1.0, hits.sum())
    return ImageOverlaps(overlaps, np.zeros(targets, bool), np.zeros(targets, bool))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--dets", type=int, default=300)
    parser.add_argument("--targets", type=int, default=6)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.05, 0.2, 1.0])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for share in args.shares:
        images = [image_overlaps(rng, args.dets, args.targets, share) for _ in range(args.images)]
        start = time.perf_counter()
        for image in images:
            match_images([image])
        seconds = time.perf_counter() - start
        print(f"{share:.2f} of predictions overlap a target: {seconds:.3f} s, {args.images} images")


if __name__ == "__main__":
    main()
