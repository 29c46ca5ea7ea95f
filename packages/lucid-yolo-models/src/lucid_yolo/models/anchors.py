"""Anchor points and the distance ↔ box transform shared by decoding and the losses.

Anchor-free YOLO heads predict, at every cell of every level, four edge distances from the cell
centre. The same point grid is needed by the decoder, the assigner and the loss, so it lives here,
once. Points are cell centres ``((j + 0.5) * stride, (i + 0.5) * stride)`` in input pixels, levels
concatenated in the order given, row-major within a level — the same order as the ``A`` axis of
the raw outputs (:mod:`lucid_yolo.models.outputs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def make_anchors(
    feature_sizes: Sequence[tuple[int, int]],
    strides: Sequence[int],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Build the anchor points of a multi-level head.

    Args:
        feature_sizes: (height, width) of each level's feature map.
        strides: input pixels per cell of each level.
        device: where the tensors live.
        dtype: their dtype.

    Returns:
        ``points`` (A, 2) cell centres ``xy`` in input pixels and ``point_strides`` (A, 1), with
        ``A = sum(h * w)``.

    Raises:
        ValueError: when the two sequences differ in length.
    """
    if len(feature_sizes) != len(strides):
        raise ValueError(
            f"got {len(feature_sizes)} feature sizes but {len(strides)} strides; pass one stride "
            "per level"
        )
    points: list[Tensor] = []
    point_strides: list[Tensor] = []
    for (height, width), stride in zip(feature_sizes, strides, strict=True):
        ys = (torch.arange(height, device=device, dtype=dtype) + 0.5) * stride
        xs = (torch.arange(width, device=device, dtype=dtype) + 0.5) * stride
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack((grid_x, grid_y), dim=-1).reshape(-1, 2))
        point_strides.append(torch.full((height * width, 1), stride, device=device, dtype=dtype))
    return torch.cat(points), torch.cat(point_strides)


def distances_to_xyxy(distances: Tensor, points: Tensor) -> Tensor:
    """Turn edge distances into boxes.

    Args:
        distances: (..., A, 4) ``(left, top, right, bottom)`` in pixels (already times stride).
        points: (A, 2) anchor points ``xy`` in pixels.

    Returns:
        (..., A, 4) boxes ``xyxy`` in pixels.
    """
    left_top, right_bottom = distances[..., :2], distances[..., 2:]
    return torch.cat((points - left_top, points + right_bottom), dim=-1)


def xyxy_to_distances(boxes: Tensor, points: Tensor) -> Tensor:
    """Inverse of :func:`distances_to_xyxy`.

    Args:
        boxes: (..., A, 4) ``xyxy`` in pixels.
        points: (A, 2) anchor points ``xy`` in pixels.

    Returns:
        (..., A, 4) ``(left, top, right, bottom)`` distances in pixels (negative when the point lies
        outside the box).
    """
    top_left, bottom_right = boxes[..., :2], boxes[..., 2:]
    return torch.cat((points - top_left, bottom_right - points), dim=-1)


__all__ = ["distances_to_xyxy", "make_anchors", "xyxy_to_distances"]
