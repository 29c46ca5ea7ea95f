"""Hand-built raw outputs and batches for the loss tests: one 4x4 level of 8-px cells.

A 32x32 input with a single stride-8 level has 16 anchors at x, y in {4, 12, 20, 28}
(index = 4 * row + col), small enough to reason about every anchor by hand.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_yolo.models import make_anchors, xyxy_to_distances
from lucid_yolo.train.data import Batch

SIZE = 32
STRIDE = 8
A = 16
POINTS, STRIDES = make_anchors([(4, 4)], [STRIDE])


def make_batch(
    boxes: list[list[float]], classes: list[int], valid: list[bool] | None = None
) -> Batch:
    """One image with the given instances (``xyxy`` pixels)."""
    flags = valid if valid is not None else [True] * len(boxes)
    return Batch(
        images=torch.zeros(1, 3, SIZE, SIZE, dtype=torch.uint8),
        classes=torch.tensor([classes]),
        valid=torch.tensor([flags]),
        boxes=torch.tensor([boxes]),
        image_ids=torch.zeros(1, dtype=torch.long),
        orig_sizes=torch.tensor([[SIZE, SIZE]]),
        scale_pad=torch.tensor([[1.0, 0.0, 0.0]]),
    )


def distances_for(box: list[float]) -> Tensor:
    """(1, 4, A) raw distances (stride units) with which every anchor predicts ``box``."""
    boxes = torch.tensor(box).expand(A, 4)
    return (xyxy_to_distances(boxes, POINTS) / STRIDES).T[None].contiguous()


def detect_outputs(box: list[float], num_classes: int = 1, logit: float = 0.0) -> dict[str, Tensor]:
    """Both branches predict ``box`` at every anchor with constant class logits."""
    distances = distances_for(box)
    cls = torch.full((1, num_classes, A), logit)
    return {
        "o2m.box": distances.clone().requires_grad_(),
        "o2m.cls": cls.clone().requires_grad_(),
        "o2o.box": distances.clone().requires_grad_(),
        "o2o.cls": cls.clone().requires_grad_(),
    }
