"""Rotated boxes: angle convention, corners, hull and the probabilistic IoU used for NMS.

A rotated box is ``xywhr``: centre, width along the box's own x axis, height, and the angle
``r`` (radians, counter-clockwise in image axes where y points down, i.e. clockwise on screen)
of that axis. The long-edge convention makes the representation unique: ``w >= h`` and
``r`` in ``[-pi/4, 3pi/4)``.

Overlap uses ProbIoU (Llerena et al. 2021, "Gaussian Bounding Boxes and Probabilistic
Intersection-over-Union for Object Detection"): each box becomes a 2-D Gaussian with the box's
centre and covariance ``R diag(w²/12, h²/12) Rᵀ`` (a uniform density's moments); the
similarity is ``1 − Hellinger distance`` derived from the Bhattacharyya distance of the two
Gaussians. It is differentiable, cheap, batched, and equals 1 for identical boxes; unlike
polygon IoU it does not need clipping, at the price of being an approximation (two squares
rotated by 90° relative to each other are identical Gaussians — harmless for NMS).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_EPS = 1e-7


def regularize_rboxes(rboxes: Tensor) -> Tensor:
    """Bring ``xywhr`` boxes to the long-edge convention.

    Args:
        rboxes: (..., 5) ``xywhr``, any angle, any side order.

    Returns:
        (..., 5) the same boxes with ``w >= h`` and ``r`` in ``[-pi/4, 3pi/4)``.
    """
    x, y, w, h, r = rboxes.unbind(-1)
    swap = w < h
    long_side = torch.where(swap, h, w)
    short_side = torch.where(swap, w, h)
    r = torch.where(swap, r + math.pi / 2, r)
    r = torch.remainder(r + math.pi / 4, math.pi) - math.pi / 4
    return torch.stack((x, y, long_side, short_side, r), dim=-1)


def rbox_corners(rboxes: Tensor) -> Tensor:
    """Corners of rotated boxes.

    Args:
        rboxes: (..., 5) ``xywhr``.

    Returns:
        (..., 4, 2) corner ``xy`` in order (+w/2, +h/2), (−w/2, +h/2), (−w/2, −h/2),
        (+w/2, −h/2) of the box frame.
    """
    centre = rboxes[..., :2]
    half_w, half_h = rboxes[..., 2] / 2, rboxes[..., 3] / 2
    cos, sin = torch.cos(rboxes[..., 4]), torch.sin(rboxes[..., 4])
    signs = rboxes.new_tensor([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]])  # (4, 2)
    u = signs[:, 0] * half_w[..., None]  # (..., 4) along the box's x axis
    v = signs[:, 1] * half_h[..., None]
    xs = centre[..., 0:1] + u * cos[..., None] - v * sin[..., None]
    ys = centre[..., 1:2] + u * sin[..., None] + v * cos[..., None]
    return torch.stack((xs, ys), dim=-1)


def rbox_hull(rboxes: Tensor) -> Tensor:
    """Axis-aligned hull of rotated boxes: (..., 5) ``xywhr`` → (..., 4) ``xyxy``."""
    corners = rbox_corners(rboxes)
    return torch.cat((corners.amin(dim=-2), corners.amax(dim=-2)), dim=-1)


def _covariance(rboxes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    a = rboxes[..., 2].square() / 12
    b = rboxes[..., 3].square() / 12
    cos, sin = torch.cos(rboxes[..., 4]), torch.sin(rboxes[..., 4])
    return a * cos**2 + b * sin**2, a * sin**2 + b * cos**2, (a - b) * cos * sin


def probiou(rboxes1: Tensor, rboxes2: Tensor) -> Tensor:
    """Pairwise ProbIoU.

    Args:
        rboxes1: (N, 5) ``xywhr``.
        rboxes2: (M, 5) ``xywhr``.

    Returns:
        (N, M) similarity in ``[0, 1]``, 1 for identical boxes.
    """
    x1, y1 = rboxes1[:, None, 0], rboxes1[:, None, 1]
    x2, y2 = rboxes2[None, :, 0], rboxes2[None, :, 1]
    a1, b1, c1 = (t[:, None] for t in _covariance(rboxes1))
    a2, b2, c2 = (t[None, :] for t in _covariance(rboxes2))
    a, b, c = (a1 + a2) / 2, (b1 + b2) / 2, (c1 + c2) / 2
    det = (a * b - c.square()).clamp(min=_EPS)
    dx, dy = x1 - x2, y1 - y2
    # 1/8 dμᵀ Σ⁻¹ dμ with Σ = (Σ1 + Σ2) / 2, Σ⁻¹ = [[b, −c], [−c, a]] / det
    mahalanobis = (b * dx.square() + a * dy.square() - 2 * c * dx * dy) / (8 * det)
    det1 = (a1 * b1 - c1.square()).clamp(min=0)
    det2 = (a2 * b2 - c2.square()).clamp(min=0)
    log_term = 0.5 * torch.log(det / (torch.sqrt(det1 * det2) + _EPS) + _EPS)
    bhattacharyya = (mahalanobis + log_term).clamp(min=_EPS, max=100.0)
    hellinger = torch.sqrt(1.0 - torch.exp(-bhattacharyya) + _EPS)
    return 1.0 - hellinger


__all__ = ["probiou", "rbox_corners", "rbox_hull", "regularize_rboxes"]
