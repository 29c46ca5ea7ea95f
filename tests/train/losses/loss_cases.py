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


TASK_BOXES = [[0.0, 0.0, 16.0, 16.0], [8.0, 4.0, 30.0, 20.0], [2.0, 18.0, 7.0, 23.0]]


def task_case(
    task: str, num_valid: int, num_classes: int = 2, num_keypoints: int = 3, seed: int = 0
) -> tuple[dict[str, Tensor], Batch]:
    """Random raw outputs of ``task`` and a 3-row batch whose first ``num_valid`` rows are real."""
    generator = torch.Generator().manual_seed(seed)

    def leaf(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator).requires_grad_()

    outputs: dict[str, Tensor] = {}
    for branch in ("o2m", "o2o"):
        outputs[f"{branch}.box"] = (torch.rand(1, 4, A, generator=generator) * 2).requires_grad_()
        outputs[f"{branch}.cls"] = leaf(1, num_classes, A)
        if task == "segment":
            outputs[f"{branch}.mask_coef"] = leaf(1, 4, A)
        if task == "pose":
            outputs[f"{branch}.kpt"] = leaf(1, num_keypoints * 3, A)
            outputs[f"{branch}.kpt_scale"] = leaf(1, num_keypoints * 2, A)
        if task == "obb":
            outputs[f"{branch}.angle"] = leaf(1, 1, A)
    if task == "segment":
        outputs["protos"] = leaf(1, 4, SIZE // 4, SIZE // 4)
        outputs["semantic"] = leaf(1, num_classes, SIZE // 8, SIZE // 8)
    valid = [i < num_valid for i in range(len(TASK_BOXES))]
    classes = [i % num_classes if flag else -1 for i, flag in enumerate(valid)]
    batch = make_batch(TASK_BOXES, classes, valid)
    rows = torch.tensor(valid)[None, :, None]
    boxes = batch["boxes"] * rows
    batch["boxes"] = boxes
    masks = torch.zeros(1, len(TASK_BOXES), SIZE // 4, SIZE // 4, dtype=torch.uint8)
    for index, (x1, y1, x2, y2) in enumerate(TASK_BOXES):
        if valid[index]:
            masks[0, index, int(y1) // 4 : int(y2) // 4, int(x1) // 4 : int(x2) // 4] = 1
    batch["masks"] = masks
    centres = (boxes[..., :2] + boxes[..., 2:]) / 2
    keypoints = torch.cat(
        (
            centres[:, :, None].expand(1, 3, num_keypoints, 2),
            torch.full((1, 3, num_keypoints, 1), 2.0),
        ),
        dim=-1,
    )
    batch["keypoints"] = keypoints * rows[..., None]
    sizes = boxes[..., 2:] - boxes[..., :2]
    batch["rboxes"] = torch.cat((centres, sizes, torch.full((1, 3, 1), 0.25)), dim=-1) * rows
    return outputs, batch
