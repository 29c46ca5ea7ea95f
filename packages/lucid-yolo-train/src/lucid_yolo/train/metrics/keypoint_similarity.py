"""Object keypoint similarity (OKS), the IoU-like overlap COCO uses to match pose predictions.

For a prediction ``d`` and a target ``g`` with visible keypoints ``V`` (visibility > 0)::

    OKS = mean over i in V of exp(-d_i**2 / (2 * s**2 * k_i**2)),   k_i = 2 * sigma_i

where ``d_i`` is the pixel distance between the predicted and labelled keypoint ``i`` and ``s**2``
is the target's area. A target with no visible keypoint (which COCO ignores, see
:mod:`lucid_yolo.train.metrics.mean_average_precision`) still needs an overlap, because a
prediction that lands on it must be ignored rather than counted false: COCO then measures each
predicted keypoint's distance to the box enlarged to three times its width and height (zero inside)
and averages over all ``K`` keypoints. Both rules follow the COCO keypoint evaluation definition
(cocodataset.org/#keypoints-eval).

Sigmas: COCO publishes per-keypoint sigmas for its 17-point person skeleton
(:data:`COCO_KEYPOINT_SIGMAS`). For any other keypoint count there is no published calibration, so
:func:`keypoint_sigmas` uses the *mean* of the COCO sigmas for every keypoint (about 0.0669): each
keypoint is judged as strictly as an average COCO keypoint, whatever the skeleton. Pass explicit
sigmas when a dataset defines its own.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_yolo.train.geometry.keypoint_ops import COCO_KEYPOINT_SIGMAS
from lucid_yolo.train.geometry.keypoint_ops import keypoint_sigmas as geometry_sigmas

_EPS = float(torch.finfo(torch.float64).eps)


def keypoint_sigmas(num_keypoints: int) -> Tensor:
    """Per-keypoint OKS sigmas as a float64 tensor (the rule of
    :func:`lucid_yolo.train.geometry.keypoint_ops.keypoint_sigmas`).

    Args:
        num_keypoints: K, the keypoint count of the dataset.

    Returns:
        (K,) float64: the COCO sigmas when K == 17, else the mean COCO sigma repeated K times.

    Raises:
        ValueError: ``num_keypoints`` is not positive.
    """
    return torch.tensor(geometry_sigmas(num_keypoints), dtype=torch.float64)


def keypoint_similarity(
    pred_keypoints: Tensor,
    target_keypoints: Tensor,
    target_boxes: Tensor,
    target_areas: Tensor,
    sigmas: Tensor,
) -> Tensor:
    """OKS of every prediction with every target.

    Leading batch dimensions ``...`` are optional (one image, or a padded batch of images at
    once); each value is computed the same way either way.

    Args:
        pred_keypoints: (..., n, K, 2+) pixels; columns 0 and 1 are ``x, y``, the rest is unused.
        target_keypoints: (..., m, K, 3) pixels ``x, y`` and visibility (> 0 means labelled).
        target_boxes: (..., m, 4) ``xyxy`` pixels, used only for targets without visible
            keypoints.
        target_areas: (..., m) the scale ``s**2`` of each target (COCO's ``area`` field).
        sigmas: (K,) per-keypoint sigmas, see :func:`keypoint_sigmas`.

    Returns:
        (..., n, m) float64 OKS in [0, 1].
    """
    dev = pred_keypoints.device
    xd = pred_keypoints[..., 0].to(torch.float64)[..., :, None, :]  # (..., n, 1, K)
    yd = pred_keypoints[..., 1].to(torch.float64)[..., :, None, :]
    g = target_keypoints.to(device=dev, dtype=torch.float64)[
        ..., None, :, :, :
    ]  # (..., 1, m, K, 3)
    visible = g[..., 2] > 0  # (..., 1, m, K)
    n_visible = visible.sum(dim=-1)  # (..., 1, m)
    box = target_boxes.to(device=dev, dtype=torch.float64)[
        ..., None, :, None, :
    ]  # (..., 1, m, 1, 4)
    w, h = box[..., 2] - box[..., 0], box[..., 3] - box[..., 1]  # (..., 1, m, 1)
    x0, x1 = box[..., 0] - w, box[..., 2] + w
    y0, y1 = box[..., 1] - h, box[..., 3] + h
    labelled = (n_visible > 0)[..., None]  # (..., 1, m, 1)
    dx = torch.where(labelled, xd - g[..., 0], (x0 - xd).clamp(min=0) + (xd - x1).clamp(min=0))
    dy = torch.where(labelled, yd - g[..., 1], (y0 - yd).clamp(min=0) + (yd - y1).clamp(min=0))
    variances = (2.0 * sigmas.to(device=dev, dtype=torch.float64)) ** 2  # (K,)
    area = target_areas.to(device=dev, dtype=torch.float64)[..., None, :, None] + _EPS
    e = (dx**2 + dy**2) / variances / area / 2.0  # (..., n, m, K)
    counted = torch.where(labelled, visible, True)  # (..., n, m, K) after broadcast
    similarity = torch.exp(-e) * counted
    K = pred_keypoints.shape[-2]
    count = torch.where(n_visible > 0, n_visible, K).to(torch.float64)  # (..., 1, m)
    return similarity.sum(dim=-1) / count


__all__ = ["COCO_KEYPOINT_SIGMAS", "keypoint_sigmas", "keypoint_similarity"]
