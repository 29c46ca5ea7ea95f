"""Two CPU processes on the gloo backend, for the distributed-metric tests.

``torch.multiprocessing.spawn`` pickles its target by module name, and pytest's importlib mode
gives test modules names a fresh process cannot import; this helper sits on the test
``pythonpath`` so the spawned ranks can import it.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

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


def _rank_main(
    rank: int,
    world_size: int,
    init_file: str,
    out_dir: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    try:
        result = fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
    (Path(out_dir) / f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def run_ranks(fn: Callable[..., Any], world_size: int, tmp_path: Path, *args: Any) -> list[Any]:
    """``fn(rank, world_size, *args)`` in ``world_size`` spawned gloo ranks; their results."""
    mp.spawn(
        _rank_main,
        args=(world_size, str(tmp_path / "init"), str(tmp_path), fn, args),
        nprocs=world_size,
    )
    return [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(world_size)]
