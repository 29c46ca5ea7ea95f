"""One entry point from a task name to its loss."""

from __future__ import annotations

import difflib
from typing import Any

from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.losses.loss_base import DetectionLoss, YoloLoss
from lucid_yolo.train.losses.obb_loss import OBBLoss
from lucid_yolo.train.losses.pose_loss import PoseLoss
from lucid_yolo.train.losses.segment_loss import SegmentationLoss

LOSSES: dict[str, type[YoloLoss]] = {
    loss.task: loss for loss in (DetectionLoss, SegmentationLoss, PoseLoss, OBBLoss)
}


def build_loss(task: str, num_classes: int, **options: Any) -> YoloLoss:
    """Build the loss of ``task``.

    Args:
        task: ``"detect"``, ``"segment"``, ``"pose"`` or ``"obb"``.
        num_classes: ``C``.
        **options: keyword arguments of the task's loss class (e.g. ``gains``, ``topk``,
            ``num_keypoints`` for pose, ``mask_samples`` for segment).

    Returns:
        The loss module, called as ``loss(outputs, batch, epoch_fraction)``.

    Raises:
        TrainConfigError: for an unknown task, with the closest known name.

    Example:
        >>> loss = build_loss("pose", num_classes=1, num_keypoints=17)
        >>> type(loss).__name__
        'PoseLoss'
    """
    if task not in LOSSES:
        close = difflib.get_close_matches(task, LOSSES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise TrainConfigError(f"unknown task {task!r}: {hint}expected one of {sorted(LOSSES)!r}")
    return LOSSES[task](num_classes, **options)


__all__ = ["LOSSES", "build_loss"]
