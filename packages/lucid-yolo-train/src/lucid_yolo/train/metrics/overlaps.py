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

import numpy as np
import torch
from torch import Tensor

from lucid_yolo.train.metrics import host_shortcuts

_FLOAT32_EXACT_COUNT = 2**24
_CHUNK_VALUES = 2**24
"""Mask pixels cast to float at once, in the product and in the counts (at least one mask)."""


def box_overlaps(pred_boxes: Tensor, target_boxes: Tensor, crowd: Tensor) -> Tensor:
    """IoU of every prediction box with every target box (crowd targets: intersection / pred area).

    Leading batch dimensions ``...`` are optional (one image, or a padded batch of images at
    once); each value is computed the same way either way.

    Args:
        pred_boxes: (..., n, 4) ``xyxy`` pixels.
        target_boxes: (..., m, 4) ``xyxy`` pixels.
        crowd: (..., m) bool, COCO crowd flag per target.

    Returns:
        (..., n, m) float64 overlaps in [0, 1].
    """
    p = pred_boxes.to(torch.float64)
    t = target_boxes.to(torch.float64)
    wh = (
        torch.minimum(p[..., :, None, 2:], t[..., None, :, 2:])
        - torch.maximum(p[..., :, None, :2], t[..., None, :, :2])
    ).clamp(min=0.0)  # (..., n, m, 2)
    inter = wh[..., 0] * wh[..., 1]
    area_p = (p[..., 2] - p[..., 0]) * (p[..., 3] - p[..., 1])
    area_t = (t[..., 2] - t[..., 0]) * (t[..., 3] - t[..., 1])
    union = area_p[..., :, None] + area_t[..., None, :] - inter
    return _divide(inter, union, area_p, crowd)


def mask_overlaps(pred_masks: Tensor, target_masks: Tensor, crowd: Tensor) -> Tensor:
    """IoU of every prediction mask with every target mask (crowd: intersection / pred area).

    Intersections are one matrix product of the flattened masks, a chunk of predictions at a
    time (a float copy of every prediction mask would be 4 bytes per pixel and instance). On the
    CPU (:mod:`.host_shortcuts`) the product runs only on the bounding rectangle of all target
    pixels, outside which no intersection can occur; elsewhere it runs on the whole frame,
    because finding that rectangle means reading it back to the host, which would stall a GPU
    validation loop for less than the product costs there (issue 11). On the whole frame the
    product also counts each prediction's pixels, against a row of ones beside the targets: the
    float copy it already made serves, instead of a second pass that would cast the masks again
    (issue 11, memory); the same exact integers either way.

    Args:
        pred_masks: (n, H, W) bool (or 0/1) masks at source-image resolution.
        target_masks: (m, H, W) bool (or 0/1), same (H, W) as ``pred_masks``.
        crowd: (m,) bool, COCO crowd flag per target.

    Returns:
        (n, m) float64 overlaps in [0, 1].
    """
    n, m = pred_masks.shape[0], target_masks.shape[0]
    height, width = pred_masks.shape[1:]
    target_masks = target_masks.to(pred_masks.device)
    window = _target_window(target_masks)
    if not (n and m and window is not None):
        # no intersection: every overlap is 0 whatever the areas (an empty denominator too)
        return torch.zeros(n, m, dtype=torch.float64, device=pred_masks.device)
    rows, cols = window
    pixels = (rows.stop - rows.start) * (cols.stop - cols.start)
    whole_frame = pixels == height * width
    dtype = torch.float32 if pixels < _FLOAT32_EXACT_COUNT else torch.float64
    # (m, window pixels) targets, with the row of ones below them on the whole frame: one
    # float buffer, the bool masks converted as they are copied in
    t = torch.ones(m + 1 if whole_frame else m, pixels, dtype=dtype, device=pred_masks.device)
    t[:m].copy_(target_masks[:, rows, cols].reshape(m, pixels))
    chunk = max(1, _CHUNK_VALUES // pixels)  # predictions cast to float at a time
    # an ambient autocast (a bf16 validation step) would round the counts in its matmul
    with torch.autocast(pred_masks.device.type, enabled=False):
        parts = [
            pred_masks[start : start + chunk, rows, cols].reshape(-1, pixels).to(dtype) @ t.T
            for start in range(0, n, chunk)
        ]
    # one chunk (a trained network's few rows) needs no buffer to gather the parts in
    counts = (parts[0] if len(parts) == 1 else torch.cat(parts)).to(torch.float64)
    inter = counts[:, :m]
    area_p = counts[:, m] if whole_frame else _count(pred_masks)
    union = area_p[:, None] + _count(target_masks)[None, :] - inter
    return _divide(inter, union, area_p, crowd)


def _target_window(target_masks: Tensor) -> tuple[slice, slice] | None:
    """(rows, cols) to multiply over: the targets' bounding rectangle where the host's shortcuts
    are taken (:mod:`.host_shortcuts`), else the frame.

    ``None`` when the targets then hold no pixel (every intersection is 0).
    """
    height, width = target_masks.shape[1:]
    if not host_shortcuts.taken(target_masks.device):
        return (slice(0, height), slice(0, width)) if height * width else None
    covered = target_masks.to(torch.bool).any(dim=0)  # (H, W) any target pixel
    rows, cols = torch.nonzero(covered.any(dim=1)), torch.nonzero(covered.any(dim=0))
    if not rows.numel():
        return None
    return slice(int(rows[0]), int(rows[-1]) + 1), slice(int(cols[0]), int(cols[-1]) + 1)


def _count(masks: Tensor) -> Tensor:
    """(k,) float64 number of set pixels per mask (NumPy where the host's shortcuts are taken:
    much faster on the CPU).

    Otherwise a few masks at a time: a sum in float64 first casts its whole input, which for
    300 predicted masks of a 640 px image is 983 MB beside a replayed fit's graph pool (issue
    11). Each mask's count is an integer below 2**53, exact whatever the summation order.
    """
    k, pixels = masks.shape[0], masks.shape[1] * masks.shape[2]
    flat = masks.reshape(k, pixels)
    if host_shortcuts.taken(flat.device):
        return torch.from_numpy(np.count_nonzero(flat.numpy(), axis=1).astype(np.float64))
    chunk = max(1, _CHUNK_VALUES // max(pixels, 1))
    if k <= chunk:
        return flat.sum(dim=1, dtype=torch.float64)
    counts = [flat[i : i + chunk].sum(dim=1, dtype=torch.float64) for i in range(0, k, chunk)]
    return torch.cat(counts)


def _divide(inter: Tensor, union: Tensor, area_pred: Tensor, crowd: Tensor) -> Tensor:
    """(..., n, m) intersection over union, or over the prediction's area for crowd targets."""
    denominator = torch.where(crowd.to(inter.device)[..., None, :], area_pred[..., :, None], union)
    positive = denominator > 0
    return torch.where(positive, inter / torch.where(positive, denominator, 1.0), 0.0)


__all__ = ["box_overlaps", "mask_overlaps"]
