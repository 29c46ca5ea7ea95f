"""Rotated-box helpers (``xywhr``): angle convention, corners, containment and ProbIoU.

An ``xywhr`` box is ``(cx, cy, w, h, r)``: centre and size in pixels, ``r`` the rotation in radians
of the box's ``w`` axis from the image ``x`` axis (counter-clockwise in a y-down image, i.e.
clockwise on screen). The project's convention is **long-edge**: ``w >= h`` and
``r in [-pi/4, 3pi/4)``, one representative per physical box (a rotation by ``pi`` is the same
box), which is also the range the OBB head decodes to (``(sigmoid - 0.25) * pi``).

All functions broadcast over leading dimensions and are free of host syncs. The convention,
corners, covariance and ProbIoU are the decoder's own (:mod:`lucid_yolo.models.decode.rotated`),
re-exported under the names the losses and assigners use, so training and decoding cannot drift.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_yolo.models.decode.rotated import probiou_aligned as probiou
from lucid_yolo.models.decode.rotated import rbox_corners as xywhr_to_corners
from lucid_yolo.models.decode.rotated import rbox_covariance
from lucid_yolo.models.decode.rotated import regularize_rboxes as normalize_xywhr


def points_in_xywhr(points: Tensor, rboxes: Tensor, eps: float = 1e-9) -> Tensor:
    """Whether points lie strictly inside rotated boxes.

    The point is expressed in the box frame (rotated by ``-r`` about the centre) and compared with
    the half sizes, so no polygon test is needed.

    Args:
        points: (..., 2) ``xy``.
        rboxes: (..., 5) ``xywhr``, broadcastable against ``points`` (e.g. ``(B, N, 1, 5)`` with
            ``(A, 2)`` points gives ``(B, N, A)``).
        eps: margin; a point on an edge is outside.

    Returns:
        (...) bool.
    """
    delta = points - rboxes[..., :2]
    cos, sin = torch.cos(rboxes[..., 4]), torch.sin(rboxes[..., 4])
    along_w = delta[..., 0] * cos + delta[..., 1] * sin
    along_h = -delta[..., 0] * sin + delta[..., 1] * cos
    inside_w = rboxes[..., 2] / 2 - along_w.abs() > eps
    inside_h = rboxes[..., 3] / 2 - along_h.abs() > eps
    return inside_w & inside_h


__all__ = [
    "normalize_xywhr",
    "points_in_xywhr",
    "probiou",
    "rbox_covariance",
    "xywhr_to_corners",
]
