"""The metric scene of the distributed-metric tests, and one rank's part of it.

Spawned ranks import this module by name (see ``tests/helpers/gloo_ranks.py``).
"""

from __future__ import annotations

import torch

from lucid_yolo.train.metrics import (
    ImagePredictions,
    ImageTargets,
    MeanAveragePrecision,
    gather_across_ranks,
)

KINDS = ("box", "mask", "pose", "obb")
SIZE = 48
"""Side of the square source images, pixels (masks are SIZE × SIZE)."""


def scene(num_images: int = 9) -> tuple[list[ImagePredictions], list[ImageTargets]]:
    """Noisy predictions of random targets with every geometry field; scores tied in steps of
    0.25, so the images' order decides ties and a wrong merge order shows in the mAP."""
    g = torch.Generator().manual_seed(7)
    preds, targets = [], []
    for _ in range(num_images):
        n = 4
        xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * (SIZE - 16)
        wh = 6 + torch.rand(n, 2, generator=g, dtype=torch.float64) * 10
        boxes = torch.cat([xy, xy + wh], 1)
        noisy = boxes + torch.randn(n, 4, generator=g, dtype=torch.float64)
        classes = torch.randint(0, 2, (n,), generator=g)
        scores = torch.randint(1, 4, (n,), generator=g).double() / 4
        keypoints = torch.cat(
            [
                xy[:, None] + torch.rand(n, 17, 2, generator=g) * wh[:, None],
                torch.full((n, 17, 1), 2.0),
            ],
            2,
        )
        rboxes = torch.cat([xy + wh / 2, wh, torch.zeros(n, 1, dtype=torch.float64)], 1)
        preds.append(
            ImagePredictions(
                scores,
                classes,
                boxes=noisy,
                masks=_masks(noisy),
                keypoints=keypoints + torch.randn(n, 17, 3, generator=g),
                rboxes=torch.cat([noisy[:, :2] / 2 + noisy[:, 2:] / 2, wh, rboxes[:, 4:]], 1),
            )
        )
        targets.append(
            ImageTargets(
                classes, boxes=boxes, masks=_masks(boxes), keypoints=keypoints, rboxes=rboxes
            )
        )
    return preds, targets


def _masks(boxes: torch.Tensor) -> torch.Tensor:
    """(n, SIZE, SIZE) bool: each ``xyxy`` box filled."""
    grid = torch.arange(SIZE, dtype=torch.float64) + 0.5
    inside_x = (grid[None] >= boxes[:, 0:1]) & (grid[None] < boxes[:, 2:3])
    inside_y = (grid[None] >= boxes[:, 1:2]) & (grid[None] < boxes[:, 3:4])
    return inside_y[:, :, None] & inside_x[:, None, :]


def shard_metrics(rank: int, world_size: int, padded: bool) -> dict[str, float]:
    """This rank's images (every ``world_size``-th from ``rank``; ``padded`` also repeats image
    0 on the last rank, as a padding sampler does), gathered across ranks and computed."""
    preds, targets = scene()
    ids = list(range(rank, len(preds), world_size))
    if padded and rank == world_size - 1:
        ids.append(0)
    metric = MeanAveragePrecision(kinds=KINDS)
    metric.update([preds[i] for i in ids], [targets[i] for i in ids], image_ids=ids)
    return gather_across_ranks(metric).compute()


def shard_metrics_runs(rank: int, world_size: int, paddings: list[bool]) -> list[dict[str, float]]:
    """:func:`shard_metrics` for each of ``paddings`` in turn, in one process: a spawned rank
    spends most of its time importing torch, so one spawn serves every run."""
    return [shard_metrics(rank, world_size, padded) for padded in paddings]
