"""Oriented-box loss: ProbIoU, L1 on rotated-frame edge distances, and an angle term.

Decoding follows :mod:`lucid_yolo.models.outputs`: the angle is the raw output in radians (the
Ultralytics YOLO26 convention, so fine-tuning imported weights starts from the boxes they predict)
and the four distances ``(l, t, r, b)`` are measured along the box's own
axes, so the centre is the anchor plus the rotated offset ``((r - l) / 2, (b - t) / 2)`` and the
size is ``(l + r, t + b)``.

ProbIoU already depends on the angle, but through the box's covariance only, and that dependence
fades as a box becomes square. The explicit angle term ``sin^2(r - r*)`` (period ``pi``, so the
wrap of the long-edge range at ``-pi/4 / 3pi/4`` costs nothing) is weighted by the target's
elongation ``((w - h) / (w + h))^2``: full weight for needles, zero for squares, whose angle is
ambiguous by ``pi/2``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from lucid_yolo.models.decode import distances_to_xywhr, xywhr_to_distances
from lucid_yolo.models.geometry import probiou
from lucid_yolo.models.outputs import ANGLE, branch_key
from lucid_yolo.train.assign import RotatedTaskAlignedAssigner, TaskAlignedAssigner
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.losses.loss_base import BranchContext, YoloLoss


def angle_loss(pred_angle: Tensor, target: Tensor) -> Tensor:
    """Elongation-weighted ``sin^2`` angle error.

    Args:
        pred_angle: (...) predicted angle, radians.
        target: (..., 5) target ``xywhr``.

    Returns:
        (...) ``sin^2(pred - r*) * ((w - h) / (w + h))^2``.
    """
    width, height = target[..., 2], target[..., 3]
    elongation = ((width - height) / (width + height).clamp(min=1e-9)).pow(2)
    return torch.sin(pred_angle - target[..., 4]).pow(2) * elongation


class OBBLoss(YoloLoss):
    """Classification, ``box`` (1 - ProbIoU), ``l1`` and ``angle`` terms on both branches.

    Takes the arguments of :class:`~lucid_yolo.train.losses.loss_base.YoloLoss`; instances are
    read from ``batch["rboxes"]`` (``xywhr``, long-edge convention).
    """

    task: ClassVar[str] = "obb"

    def _make_assigner(self, topk: int) -> TaskAlignedAssigner:
        return RotatedTaskAlignedAssigner(
            self.num_classes,
            topk=topk,
            alpha=self.alpha,
            beta=self.beta,
            stal_threshold=self.stal_threshold,
            stal_size=self.stal_size,
        )

    def _decode_boxes(
        self,
        outputs: dict[str, Tensor],
        branch: str,
        distances: Tensor,
        points: Tensor,
        strides: Tensor,
    ) -> Tensor:
        angle = outputs[branch_key(branch, ANGLE)][:, 0]  # (B, A) radians
        return distances_to_xywhr(distances * strides, angle, points)

    def _gt_boxes(self, batch: Batch) -> Tensor:
        return batch["rboxes"]

    def _target_distances(self, ctx: BranchContext) -> Tensor:
        return xywhr_to_distances(ctx.targets.boxes, ctx.points) / ctx.strides

    def _overlap(self, ctx: BranchContext, pred_boxes: Tensor) -> Tensor:
        return probiou(pred_boxes, ctx.targets.boxes)

    def _task_terms(self, ctx: BranchContext) -> dict[str, Tensor]:
        pred_angle = torch.where(ctx.targets.fg, ctx.pred_boxes[..., 4], ctx.targets.boxes[..., 4])
        angle = angle_loss(pred_angle, ctx.targets.boxes)
        return {"angle": (angle * ctx.fg_weight).sum() / ctx.score_sum}


__all__ = ["OBBLoss", "angle_loss"]
