"""Axis-aligned boxes (``xyxy``): area, IoU and CIoU for the assigner, the box loss and NMS.

All functions broadcast over leading dimensions, so one call gives element-wise values for aligned
pairs (``(..., 4)`` with ``(..., 4)``) or a pairwise matrix (``(N, 1, 4)`` with ``(1, A, 4)``).
They are pure tensor code with no host sync, so they can run inside a CUDA graph.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_EPS = 1e-7


def box_area(boxes: Tensor) -> Tensor:
    """Area of ``xyxy`` boxes, zero for inverted ones.

    Args:
        boxes: (..., 4) ``xyxy``.

    Returns:
        (...) areas in squared input units.
    """
    width = (boxes[..., 2] - boxes[..., 0]).clamp(min=0)
    height = (boxes[..., 3] - boxes[..., 1]).clamp(min=0)
    return width * height


def box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = _EPS) -> Tensor:
    """Intersection over union of two broadcastable sets of ``xyxy`` boxes.

    Args:
        boxes1: (..., 4) ``xyxy``.
        boxes2: (..., 4) ``xyxy``, broadcastable against ``boxes1``.
        eps: added to the union so degenerate (zero-area) pairs give 0 instead of NaN.

    Returns:
        (...) IoU in [0, 1].
    """
    top_left = torch.maximum(boxes1[..., :2], boxes2[..., :2])
    bottom_right = torch.minimum(boxes1[..., 2:], boxes2[..., 2:])
    overlap = (bottom_right - top_left).clamp(min=0)
    inter = overlap[..., 0] * overlap[..., 1]
    union = box_area(boxes1) + box_area(boxes2) - inter
    return inter / (union + eps)


def box_ciou(pred: Tensor, target: Tensor, eps: float = _EPS) -> Tensor:
    """Complete IoU (Zheng et al., 2020, "Distance-IoU Loss", eq. 9-11) of ``xyxy`` boxes.

    ``CIoU = IoU - rho^2 / c^2 - alpha * v`` where ``rho`` is the distance between the centres,
    ``c`` the diagonal of the smallest enclosing box, ``v = 4 / pi^2 * (atan(w_t / h_t) -
    atan(w_p / h_p))^2`` the aspect-ratio discrepancy and ``alpha = v / (1 - IoU + v)`` its
    trade-off weight, which the paper treats as a constant for the gradient (so it is detached).

    Args:
        pred: (..., 4) predicted ``xyxy``.
        target: (..., 4) target ``xyxy``, broadcastable against ``pred``.
        eps: guards the divisions for degenerate boxes.

    Returns:
        (...) CIoU, at most 1; the box loss is ``1 - CIoU``.
    """
    iou = box_iou(pred, target, eps)
    pred_wh = pred[..., 2:] - pred[..., :2]
    target_wh = target[..., 2:] - target[..., :2]
    centre_delta = (pred[..., :2] + pred[..., 2:] - target[..., :2] - target[..., 2:]) / 2
    rho2 = centre_delta.pow(2).sum(-1)
    enclosing = torch.maximum(pred[..., 2:], target[..., 2:]) - torch.minimum(
        pred[..., :2], target[..., :2]
    )
    c2 = enclosing.pow(2).sum(-1) + eps
    v = (4 / math.pi**2) * (
        torch.atan(target_wh[..., 0] / (target_wh[..., 1] + eps))
        - torch.atan(pred_wh[..., 0] / (pred_wh[..., 1] + eps))
    ).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


__all__ = ["box_area", "box_ciou", "box_iou"]
