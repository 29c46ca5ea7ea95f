"""Overlap of predictions with targets: axis-aligned boxes and binary masks, COCO's crowd rule.

COCO scores a crowd target by the share of the *prediction* that falls inside it
(intersection / prediction area) instead of IoU, so that one large crowd region can absorb many
small predictions without penalising them. Both functions take a per-target ``crowd`` flag and
apply that rule column-wise; a zero denominator gives an overlap of 0.

Everything is computed in float64, so the values equal the reference evaluator's to rounding.
Masks use one matrix product of the flattened masks, which counts intersections exactly: the
products are 0/1 and every partial sum is an integer below 2**24 (float32) or 2**53 (float64), so
no rounding can occur whichever order the BLAS sums in (TF32 keeps 0/1 exact and sums in float32).
"""

from __future__ import annotations

import torch
from torch import Tensor

_FLOAT32_EXACT_COUNT = 2**24


def box_overlaps(pred_boxes: Tensor, target_boxes: Tensor, crowd: Tensor) -> Tensor:
    """IoU of every prediction box with every target box (crowd targets: intersection / pred area).

    Args:
        pred_boxes: (n, 4) ``xyxy`` pixels.
        target_boxes: (m, 4) ``xyxy`` pixels.
        crowd: (m,) bool, COCO crowd flag per target.

    Returns:
        (n, m) float64 overlaps in [0, 1].
    """
    p = pred_boxes.to(torch.float64)
    t = target_boxes.to(torch.float64)
    wh = (
        torch.minimum(p[:, None, 2:], t[None, :, 2:])
        - torch.maximum(p[:, None, :2], t[None, :, :2])
    ).clamp(min=0.0)  # (n, m, 2)
    inter = wh[..., 0] * wh[..., 1]
    area_p = (p[:, 2] - p[:, 0]) * (p[:, 3] - p[:, 1])
    area_t = (t[:, 2] - t[:, 0]) * (t[:, 3] - t[:, 1])
    union = area_p[:, None] + area_t[None, :] - inter
    return _divide(inter, union, area_p, crowd)


def mask_overlaps(pred_masks: Tensor, target_masks: Tensor, crowd: Tensor) -> Tensor:
    """IoU of every prediction mask with every target mask (crowd: intersection / pred area).

    Args:
        pred_masks: (n, H, W) bool (or 0/1) masks at source-image resolution.
        target_masks: (m, H, W) bool (or 0/1), same (H, W) as ``pred_masks``.
        crowd: (m,) bool, COCO crowd flag per target.

    Returns:
        (n, m) float64 overlaps in [0, 1].
    """
    n, m = pred_masks.shape[0], target_masks.shape[0]
    pixels = pred_masks.shape[1] * pred_masks.shape[2]
    dtype = torch.float32 if pixels < _FLOAT32_EXACT_COUNT else torch.float64
    p = pred_masks.reshape(n, pixels).to(dtype)  # (n, H*W)
    t = target_masks.reshape(m, pixels).to(device=p.device, dtype=dtype)  # (m, H*W)
    inter = (p @ t.T).to(torch.float64)
    area_p = p.sum(dim=1, dtype=torch.float64)
    area_t = t.sum(dim=1, dtype=torch.float64)
    union = area_p[:, None] + area_t[None, :] - inter
    return _divide(inter, union, area_p, crowd)


def _divide(inter: Tensor, union: Tensor, area_pred: Tensor, crowd: Tensor) -> Tensor:
    """(n, m) intersection over union, or over the prediction's area where ``crowd[j]``."""
    denominator = torch.where(crowd.to(inter.device)[None, :], area_pred[:, None], union)
    positive = denominator > 0
    return torch.where(positive, inter / torch.where(positive, denominator, 1.0), 0.0)


__all__ = ["box_overlaps", "mask_overlaps"]
