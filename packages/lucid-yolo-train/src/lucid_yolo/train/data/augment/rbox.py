"""Rotated boxes of the data pipeline (NumPy): corner points → ``xywhr``, long-edge convention.

Convention (the Batch contract's ``rboxes``): ``(cx, cy, w, h, r)`` in pixels and radians with
``w >= h`` (``w`` is the long edge) and ``r`` in ``[-pi/4, 3pi/4)``, the angle of the long edge from
the +x axis towards +y (image y points down, so positive ``r`` turns clockwise on screen). A
rectangle is symmetric under a half turn, so every rectangle has exactly one such encoding, except
squares, whose long edge is either side: they are encoded with the side whose angle falls in
``[-pi/4, pi/4)``.

Corners after a shear are a parallelogram, not a rectangle; :func:`corners_to_xywhr` returns the
minimum-area enclosing rectangle, which for a convex quadrilateral has a side on one of its edges
(Freeman & Shapira, CACM 1975), so trying the four edge directions is exact.
"""

from __future__ import annotations

import math

import numpy as np

from lucid_yolo.train.data.augment.geometry import Float64Array
from lucid_yolo.train.data.labels import FloatArray


def canonical_xywhr(rboxes: FloatArray) -> FloatArray:
    """Bring rotated boxes to the long-edge convention.

    Args:
        rboxes: (n, 5) ``xywhr`` in any convention (any angle, either edge first).

    Returns:
        (n, 5) float32 ``xywhr`` with ``w >= h`` and ``r`` in ``[-pi/4, 3pi/4)``.
    """
    out = rboxes.astype(np.float64, copy=True)
    swap = out[:, 2] < out[:, 3]
    out[swap, 2], out[swap, 3] = rboxes[swap, 3], rboxes[swap, 2]
    out[swap, 4] += math.pi / 2
    square = out[:, 2] == out[:, 3]
    out[:, 4] = _wrap(out[:, 4], -math.pi / 4)
    out[square, 4] = _wrap(out[square, 4], -math.pi / 4, period=math.pi / 2)
    single = out.astype(np.float32)
    upper = np.float32(3 * math.pi / 4)  # a float64 angle just below 3pi/4 can round up to it
    single[:, 4] = np.where(single[:, 4] >= upper, single[:, 4] - np.float32(math.pi), single[:, 4])
    return single


def corners_to_xywhr(corners: FloatArray) -> FloatArray:
    """Minimum-area rotated rectangles around four corner points each.

    Args:
        corners: (n, 4, 2) ``xy`` pixels of convex quadrilaterals, either winding order
            (rectangles, or parallelograms after a sheared warp).

    Returns:
        (n, 5) float32 ``xywhr`` pixels/radians, long-edge convention (module docstring).
    """
    pts = corners.astype(np.float64)
    n = pts.shape[0]
    if n == 0:
        return np.zeros((0, 5), dtype=np.float32)
    edges = np.roll(pts, -1, axis=1) - pts  # (n, 4, 2): edge k goes from corner k to k+1
    angles = np.arctan2(edges[..., 1], edges[..., 0])  # (n, 4)
    u = np.stack([np.cos(angles), np.sin(angles)], axis=-1)  # (n, 4, 2) edge directions
    v = np.stack([-u[..., 1], u[..., 0]], axis=-1)  # (n, 4, 2) their normals
    pu = np.einsum("nkd,npd->nkp", u, pts)  # (n, 4 directions, 4 points)
    pv = np.einsum("nkd,npd->nkp", v, pts)
    w = pu.max(-1) - pu.min(-1)  # (n, 4)
    h = pv.max(-1) - pv.min(-1)
    best = np.argmin(w * h, axis=1)  # (n,)
    rows = np.arange(n)
    cu = (pu.max(-1) + pu.min(-1))[rows, best] / 2
    cv = (pv.max(-1) + pv.min(-1))[rows, best] / 2
    ub, vb = u[rows, best], v[rows, best]
    centre = cu[:, None] * ub + cv[:, None] * vb  # back from the (u, v) frame to xy
    raw = np.column_stack([centre, w[rows, best], h[rows, best], angles[rows, best]])
    return canonical_xywhr(raw.astype(np.float64))


def _wrap(angle: Float64Array, low: float, period: float = math.pi) -> Float64Array:
    wrapped: Float64Array = np.mod(angle - low, period) + low
    return np.where(wrapped >= low + period, low, wrapped)


__all__ = ["canonical_xywhr", "corners_to_xywhr"]
