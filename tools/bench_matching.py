"""Host time of COCO's greedy matching per validation pass, on overlaps shaped like a real one.

Validation matches each image's kept predictions (up to ``max_dets``, 300, at the 0.001
confidence cut) to its targets. How long that takes depends on how many of them overlap a
target at IoU 0.5 or more (few for a fresh network, tens per target once trained), so this
times :func:`lucid_yolo.train.metrics.match_batch` for several shares of overlapping
predictions, ``--batch`` images per call (the evaluator matches a validation batch at once), on
``--device`` (CUDA: synchronised before and after the timed calls; each call reads its extent,
one synchronisation, which the accumulator avoids by reading it a batch later).

Command (any machine, from the repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/bench_matching.py --batch 16
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from lucid_yolo.train.metrics import ImageOverlaps, match_batch


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
    parser.add_argument("--batch", type=int, default=1, help="images matched per call")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    device = torch.device(args.device)
    flags = torch.zeros(args.batch, args.targets, dtype=torch.bool, device=device)
    for share in args.shares:
        images = [image_overlaps(rng, args.dets, args.targets, share) for _ in range(args.images)]
        stacked = torch.from_numpy(np.stack([im.overlaps for im in images])).to(device)
        batches = list(stacked.split(args.batch))  # type: ignore[no-untyped-call]
        match_batch(batches[0], flags, flags)  # warm-up
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for overlaps in batches:
            match_batch(overlaps, flags, flags)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        print(
            f"{share:.2f} of predictions overlap a target: {seconds:.4f} s for "
            f"{len(batches) * args.batch} images, {args.batch} per call, on {device}"
        )


if __name__ == "__main__":
    main()
