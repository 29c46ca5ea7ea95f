"""Raw outputs → per-anchor boxes, scores, keypoints, rotated boxes (static shapes).

Implements the decoding rules of :mod:`lucid_yolo.models.outputs`. Pure tensor code without
host syncs, so it runs inside an exported graph too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.anchors import distances_to_xyxy, make_anchors
from lucid_yolo.models.decode.results import DensePredictions
from lucid_yolo.models.exceptions import ModelConfigError
from lucid_yolo.models.geometry import normalize_xywhr, xywhr_to_xyxy
from lucid_yolo.models.model import STRIDES


def anchor_grid(
    image_size: tuple[int, int],
    strides: Sequence[int] = STRIDES,
    *,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Anchor points of an input size: ``points`` (A, 2) pixels and ``point_strides`` (A, 1).

    Raises:
        ModelConfigError: when a side is not a multiple of the largest stride.
    """
    height, width = image_size
    if height % max(strides) or width % max(strides):
        raise ModelConfigError(
            f"image_size={image_size!r} is not a multiple of {max(strides)}; letterbox or pad "
            "the input to a multiple of the largest stride"
        )
    sizes = [(height // s, width // s) for s in strides]
    return make_anchors(sizes, strides, device=device, dtype=dtype)


def distances_to_xywhr(distances: Tensor, angles: Tensor, points: Tensor) -> Tensor:
    """Rotated boxes from rotated-frame edge distances, angle kept as predicted.

    The loss needs this raw form (its gradient flows through the predicted angle); the decoder
    regularizes it into the long-edge convention (:func:`decode_rboxes`).

    Args:
        distances: (..., A, 4) ``(l, t, r, b)`` pixels, measured along the box's own axes.
        angles: (..., A) radians.
        points: (A, 2) anchor points, pixels.

    Returns:
        (..., A, 5) ``xywhr`` pixels.
    """
    left, top, right, bottom = distances.unbind(-1)
    # centre offset in the box frame, rotated into image axes
    off_u, off_v = (right - left) / 2, (bottom - top) / 2
    cos, sin = torch.cos(angles), torch.sin(angles)
    # the rotated offset is summed before the anchor is added, the reference's rounding order
    cx = points[..., 0] + (off_u * cos - off_v * sin)
    cy = points[..., 1] + (off_u * sin + off_v * cos)
    return torch.stack((cx, cy, left + right, top + bottom, angles), dim=-1)


def xywhr_to_distances(rboxes: Tensor, points: Tensor) -> Tensor:
    """Inverse of :func:`distances_to_xywhr` for the boxes' own angle.

    Args:
        rboxes: (..., A, 5) ``xywhr`` pixels.
        points: (A, 2) anchor points ``xy`` pixels.

    Returns:
        (..., A, 4) ``(l, t, r, b)`` pixels along the box axes.
    """
    delta = rboxes[..., :2] - points
    cos, sin = torch.cos(rboxes[..., 4]), torch.sin(rboxes[..., 4])
    along_w = delta[..., 0] * cos + delta[..., 1] * sin
    along_h = -delta[..., 0] * sin + delta[..., 1] * cos
    half_w, half_h = rboxes[..., 2] / 2, rboxes[..., 3] / 2
    return torch.stack(
        (half_w - along_w, half_h - along_h, half_w + along_w, half_h + along_h), dim=-1
    )


def decode_rboxes(distances: Tensor, angles: Tensor, points: Tensor) -> Tensor:
    """Rotated-frame edge distances and angles → rotated boxes in the long-edge convention.

    Args:
        distances: (B, A, 4) ``(l, t, r, b)`` pixels, measured along the box's own axes.
        angles: (B, A) radians.
        points: (A, 2) anchor points, pixels.

    Returns:
        (B, A, 5) ``xywhr``, long-edge convention.
    """
    return normalize_xywhr(distances_to_xywhr(distances, angles, points))


def decode_dense(
    raw: Mapping[str, Tensor],
    image_size: tuple[int, int],
    *,
    branch: str = keys.O2O,
    strides: Sequence[int] = STRIDES,
) -> DensePredictions:
    """Decode one branch of a network's raw outputs at every anchor.

    Args:
        raw: the network's output dict (:mod:`lucid_yolo.models.outputs`).
        image_size: ``(H, W)`` of the network input.
        branch: ``"o2o"`` (end-to-end) or ``"o2m"`` (NMS path).
        strides: the network's strides.

    Returns:
        Dense predictions; the task-specific fields are set when their outputs are present.
    """
    box = raw[keys.branch_key(branch, keys.BOX)]
    points, point_strides = anchor_grid(image_size, strides, device=box.device, dtype=box.dtype)
    distances = box.transpose(1, 2) * point_strides  # (B, A, 4) pixels
    scores = raw[keys.branch_key(branch, keys.CLS)].transpose(1, 2).sigmoid()  # (B, A, C)

    angle_key = keys.branch_key(branch, keys.ANGLE)
    rboxes: Tensor | None = None
    if angle_key in raw:
        rboxes = decode_rboxes(distances, raw[angle_key][:, 0], points)
        boxes = xywhr_to_xyxy(rboxes)
    else:
        boxes = distances_to_xyxy(distances, points)

    keypoints: Tensor | None = None
    kpt_key = keys.branch_key(branch, keys.KPT)
    if kpt_key in raw:
        kpt = raw[kpt_key]
        B, _, A = kpt.shape
        kpt = kpt.transpose(1, 2).reshape(B, A, -1, 3)  # (B, A, K, 3)
        xy = points[:, None, :] + kpt[..., :2] * point_strides[:, None, :]
        keypoints = torch.cat((xy, kpt[..., 2:].sigmoid()), dim=-1)

    coef_key = keys.branch_key(branch, keys.MASK_COEF)
    mask_coef = raw[coef_key].transpose(1, 2) if coef_key in raw else None
    return DensePredictions(
        boxes=boxes,
        scores=scores,
        mask_coef=mask_coef,
        protos=raw.get(keys.PROTOS),
        keypoints=keypoints,
        rboxes=rboxes,
    )


__all__ = ["anchor_grid", "decode_dense", "decode_rboxes"]
