"""Task-aligned assignment for oriented boxes: rotated candidates and ProbIoU alignment.

Identical to :class:`~lucid_yolo.train.assign.task_aligned.TaskAlignedAssigner` except for the
geometry: a candidate is an anchor point strictly inside the rotated instance (its STAL surrogate
widens the rotated box's short sides, same centre and angle) and the overlap ``u`` of the alignment
metric is ProbIoU, which is differentiable, cheap for all pairs and agrees with the ProbIoU box
loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_yolo.models.geometry import points_in_xywhr, probiou
from lucid_yolo.train.assign.task_aligned import TaskAlignedAssigner


class RotatedTaskAlignedAssigner(TaskAlignedAssigner):
    """Task-aligned assignment over ``xywhr`` boxes.

    Takes the arguments of :class:`TaskAlignedAssigner`; ``pred_boxes`` and ``gt_boxes`` are
    (B, A, 5) and (B, N, 5) ``xywhr`` pixels (long-edge convention) and the returned
    ``boxes`` are (B, A, 5) ``xywhr``.
    """

    box_dim = 5

    def _candidates(self, points: Tensor, gt_boxes: Tensor) -> Tensor:
        """Anchors strictly inside each rotated (STAL) surrogate; (A, 2), (B, N, 5) -> (B, N, A)."""
        sizes = self._surrogate_sizes(gt_boxes[..., 2:4])
        surrogate = torch.cat((gt_boxes[..., :2], sizes, gt_boxes[..., 4:]), dim=-1)
        return points_in_xywhr(points, surrogate[:, :, None], eps=self.eps)

    def _overlaps(self, gt_boxes: Tensor, pred_boxes: Tensor) -> Tensor:
        """ProbIoU of every instance with every prediction; -> (B, N, A)."""
        return probiou(gt_boxes[:, :, None], pred_boxes[:, None])


__all__ = ["RotatedTaskAlignedAssigner"]
