"""Keypoint similarity (COCO OKS) shared by the pose loss and the keypoint metric.

OKS (COCO keypoint evaluation) scores a predicted pose against a labelled one as the mean over
labelled keypoints of ``exp(-d^2 / (2 s^2 k^2))``: ``d`` the pixel distance, ``s^2`` the object
area and ``k = 2 sigma`` a per-keypoint falloff measured by COCO annotators.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_yolo.train.exceptions import TrainConfigError

COCO_KEYPOINT_SIGMAS: tuple[float, ...] = (
    0.026,  # nose
    0.025,  # left eye
    0.025,  # right eye
    0.035,  # left ear
    0.035,  # right ear
    0.079,  # left shoulder
    0.079,  # right shoulder
    0.072,  # left elbow
    0.072,  # right elbow
    0.062,  # left wrist
    0.062,  # right wrist
    0.107,  # left hip
    0.107,  # right hip
    0.087,  # left knee
    0.087,  # right knee
    0.089,  # left ankle
    0.089,  # right ankle
)


def keypoint_sigmas(num_keypoints: int) -> tuple[float, ...]:
    """Per-keypoint OKS sigmas for a skeleton of ``num_keypoints`` points.

    The 17-point COCO person skeleton gets the published COCO sigmas. Any other skeleton has no
    published calibration, so every keypoint gets the *mean* COCO sigma (about 0.0669): each
    keypoint is judged as strictly as an average COCO keypoint. The pose loss and the keypoint
    metric both use this rule, so training optimises what validation measures.

    Args:
        num_keypoints: ``K``, at least 1.

    Returns:
        ``K`` sigmas.

    Raises:
        TrainConfigError: when ``num_keypoints`` is below 1.
    """
    if num_keypoints < 1:
        raise TrainConfigError(f"num_keypoints must be positive, got {num_keypoints!r}")
    if num_keypoints == len(COCO_KEYPOINT_SIGMAS):
        return COCO_KEYPOINT_SIGMAS
    mean = sum(COCO_KEYPOINT_SIGMAS) / len(COCO_KEYPOINT_SIGMAS)
    return (mean,) * num_keypoints


def keypoint_oks(
    pred: Tensor, target: Tensor, visible: Tensor, area: Tensor, sigmas: Tensor, eps: float = 1e-9
) -> Tensor:
    """Object keypoint similarity of aligned predicted and labelled poses.

    Args:
        pred: (..., K, 2) predicted keypoints ``xy`` pixels.
        target: (..., K, 2) labelled keypoints ``xy`` pixels.
        visible: (..., K) bool or 0/1, which keypoints are labelled.
        area: (...) object area in squared pixels (the box area when no segment is known).
        sigmas: (K,) per-keypoint sigmas (:func:`keypoint_sigmas`).
        eps: keeps zero-area objects and poses without labelled keypoints finite.

    Returns:
        (...) OKS in [0, 1]; 0 for a pose without labelled keypoints.
    """
    squared_distance = (pred - target).pow(2).sum(-1)  # (..., K)
    falloff = 2 * area[..., None] * (2 * sigmas).pow(2) + eps
    similarity = torch.exp(-squared_distance / falloff)
    weight = visible.to(similarity.dtype)
    return (similarity * weight).sum(-1) / weight.sum(-1).clamp(min=1)


__all__ = ["COCO_KEYPOINT_SIGMAS", "keypoint_oks", "keypoint_sigmas"]
