"""Pure geometry used by the geometric augmentations: point warps, clipping and the keep rule.

The keep rule (documented once, applied by every transform that can push instances out or shrink
them): after a warp, an instance survives iff its visible box (the box clipped to the image)

* keeps at least ``min_visible`` of the area of its unclipped warped box (else ``outside``),
* is at least ``min_size`` pixels wide **and** tall (else it counts as ``too_small``),
* has an aspect ratio (long / short side) of at most ``max_aspect`` (else ``degenerate``).

Each removed instance is counted in :class:`~lucid_yolo.train.data.augment.sample.DropCounts`
under the first reason that applies, so the data module can report every loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lucid_yolo.train.data.augment.sample import DropCounts
from lucid_yolo.train.data.labels import BoolArray, FloatArray

Float64Array = npt.NDArray[np.float64]
"""Affine matrices and intermediate geometry kept in double precision."""


@dataclass(frozen=True)
class KeepRule:
    """Thresholds of the keep rule (module docstring).

    Attributes:
        min_size: minimum visible width and height, pixels.
        min_visible: minimum fraction of the warped box's area that stays inside the image.
        max_aspect: maximum long/short side ratio of the visible box.
    """

    min_size: float = 2.0
    min_visible: float = 0.1
    max_aspect: float = 20.0


def warp_points(points: FloatArray, matrix: Float64Array) -> FloatArray:
    """Apply a 2x3 affine matrix to points.

    Args:
        points: (..., 2) ``xy`` pixels.
        matrix: (2, 3) affine, ``dst = M[:, :2] @ src + M[:, 2]``.

    Returns:
        (..., 2) float32 warped points.
    """
    warped = points.astype(np.float64) @ matrix[:, :2].T.astype(np.float64) + matrix[:, 2]
    return warped.astype(np.float32)


def box_corners(boxes: FloatArray) -> FloatArray:
    """The four corners of axis-aligned boxes: (n, 4) ``xyxy`` -> (n, 4, 2) ``xy``."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    xs = np.stack([x1, x2, x2, x1], axis=1)  # (n, 4) clockwise from the top-left
    ys = np.stack([y1, y1, y2, y2], axis=1)
    return np.stack([xs, ys], axis=-1).astype(np.float32)


def points_to_box(points: FloatArray) -> FloatArray:
    """The axis-aligned hull of each instance's points: (n, p, 2) -> (n, 4) ``xyxy``."""
    if points.shape[0] == 0:
        return np.zeros((0, 4), dtype=np.float32)
    return np.concatenate([points.min(axis=1), points.max(axis=1)], axis=1).astype(np.float32)


def clip_boxes(boxes: FloatArray, width: int, height: int) -> FloatArray:
    """Clip (n, 4) ``xyxy`` boxes to ``[0, width] x [0, height]``."""
    limits = np.array([width, height, width, height], dtype=np.float32)
    return np.clip(boxes, 0.0, limits).astype(np.float32)


def clip_polygon(polygon: FloatArray, width: int, height: int) -> FloatArray:
    """Intersect a polygon with the image rectangle (Sutherland-Hodgman against four half-planes).

    Args:
        polygon: (p, 2) ``xy`` pixels, simple polygon in either winding order.
        width: image width; the kept region is ``0 <= x <= width``.
        height: image height; the kept region is ``0 <= y <= height``.

    Returns:
        (q, 2) float32 vertices of the visible part; q = 0 when nothing is visible.
    """
    pts: Float64Array = polygon.astype(np.float64)
    limits = np.array([width, height], dtype=np.float64)
    if pts.size and (pts >= 0).all() and (pts <= limits).all():
        # wholly inside: every half-plane would return it unchanged (most mosaic tiles' polygons)
        return pts.astype(np.float32)
    planes = ((0, 0.0, False), (0, width, True), (1, 0.0, False), (1, height, True))
    for axis, bound, keep_below in planes:
        if pts.shape[0] == 0:
            break
        pts = _clip_half_plane(pts, axis, float(bound), keep_below)
    # intersections are exact up to rounding: pin them onto the boundary they were cut at
    return np.clip(pts, 0.0, limits).astype(np.float32)


def _clip_half_plane(pts: Float64Array, axis: int, bound: float, keep_below: bool) -> Float64Array:
    coord = pts[:, axis]
    inside = coord <= bound if keep_below else coord >= bound
    nxt = np.concatenate((pts[1:], pts[:1]))  # each vertex's successor, cyclically
    nxt_inside = np.concatenate((inside[1:], inside[:1]))
    crossing = inside != nxt_inside
    denom = nxt[:, axis] - coord
    t = np.divide(bound - coord, denom, out=np.zeros_like(coord), where=crossing)
    cross_pts = pts + t[:, None] * (nxt - pts)  # (p, 2) edge/boundary intersections
    # each vertex contributes itself if inside, then the crossing point of its outgoing edge
    out = np.concatenate((pts, cross_pts), axis=1).reshape(-1, 2, 2)  # (p, 2, 2)
    take = np.column_stack((inside, crossing))  # (p, 2)
    result: Float64Array = out[take]
    return result


def keep_mask(
    visible: FloatArray, warped: FloatArray, rule: KeepRule, drops: DropCounts
) -> BoolArray:
    """Apply the keep rule and count what it drops.

    Args:
        visible: (n, 4) ``xyxy`` visible boxes (clipped to the image).
        warped: (n, 4) ``xyxy`` unclipped warped boxes (same instances).
        rule: thresholds.
        drops: counts to increment in place.

    Returns:
        (n,) bool, True for instances to keep.
    """
    w = visible[:, 2] - visible[:, 0]
    h = visible[:, 3] - visible[:, 1]
    area = np.maximum(w, 0) * np.maximum(h, 0)
    full = np.maximum(warped[:, 2] - warped[:, 0], 0) * np.maximum(warped[:, 3] - warped[:, 1], 0)
    outside = area < rule.min_visible * full
    small = ~outside & ((w < rule.min_size) | (h < rule.min_size))
    aspect = np.maximum(w, h) / np.maximum(np.minimum(w, h), 1e-9)
    degenerate = ~small & ~outside & (aspect > rule.max_aspect)
    drops.too_small += int(small.sum())
    drops.outside += int(outside.sum())
    drops.degenerate += int(degenerate.sum())
    keep: BoolArray = ~(small | outside | degenerate)
    return keep


__all__ = [
    "Float64Array",
    "KeepRule",
    "box_corners",
    "clip_boxes",
    "clip_polygon",
    "keep_mask",
    "points_to_box",
    "warp_points",
]
