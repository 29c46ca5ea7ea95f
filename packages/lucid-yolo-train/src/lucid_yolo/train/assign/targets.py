"""What an assigner hands to the loss: dense per-anchor targets with static shapes."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class AssignedTargets:
    """Per-anchor training targets; every tensor has a fixed shape whatever the batch holds.

    Shapes use ``B`` batch, ``A`` anchors, ``C`` classes, ``N`` padded instances per image.

    Attributes:
        labels: (B, A) int64 class of the assigned instance, ``-1`` on background anchors.
        boxes: (B, A, 4) ``xyxy`` pixels of the assigned instance (axis-aligned assigner) or
            (B, A, 5) ``xywhr`` (rotated assigner); the instance-0 box on background anchors, so
            read it through ``fg``.
        scores: (B, A, C) soft classification targets: one-hot of the label times the
            normalised alignment, zero on background anchors.
        fg: (B, A) bool foreground mask.
        gt_index: (B, A) int64 index into the ``N`` axis of the batch of the assigned instance
            (0 on background anchors), so task losses can gather masks and keypoints.
    """

    labels: Tensor
    boxes: Tensor
    scores: Tensor
    fg: Tensor
    gt_index: Tensor


__all__ = ["AssignedTargets"]
