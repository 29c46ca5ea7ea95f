"""Rotated boxes (``xywhr``): angle convention, corners, hull, containment and ProbIoU.

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

All functions broadcast over leading dimensions and are free of host syncs, so the loss, the
assigner (inside a CUDA graph), the rotated-box metric and NMS share one definition of each.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_EPS = 1e-7


def normalize_xywhr(rboxes: Tensor) -> Tensor:
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


def xywhr_to_corners(rboxes: Tensor) -> Tensor:
    """Corners of rotated boxes, in positive order (counter-clockwise in x-right/y-up axes).

    Args:
        rboxes: (..., 5) ``xywhr``, any angle; the result keeps their dtype.

    Returns:
        (..., 4, 2) corner ``xy``: (−w/2, −h/2), (+w/2, −h/2), (+w/2, +h/2), (−w/2, +h/2) of the
        box frame, i.e. starting at ``centre − u − v`` and going along ``u`` (the ``w`` edge)
        first, with ``u = (cos r, sin r)`` and ``v = (−sin r, cos r)``. The signed shoelace area
        of the four is ``+w * h``.
    """
    centre = rboxes[..., :2]
    half_w, half_h = rboxes[..., 2] / 2, rboxes[..., 3] / 2
    cos, sin = torch.cos(rboxes[..., 4]), torch.sin(rboxes[..., 4])
    # the corners' offsets by negation, not by a table of signs: a table built from a Python list
    # is a host-to-device copy, which makes the host wait for a GPU (issue 11)
    u = torch.stack([-half_w, half_w, half_w, -half_w], dim=-1)  # (..., 4) along the box's x axis
    v = torch.stack([-half_h, -half_h, half_h, half_h], dim=-1)
    xs = centre[..., 0:1] + u * cos[..., None] - v * sin[..., None]
    ys = centre[..., 1:2] + u * sin[..., None] + v * cos[..., None]
    return torch.stack((xs, ys), dim=-1)


def xywhr_to_xyxy(rboxes: Tensor) -> Tensor:
    """Axis-aligned hull of rotated boxes: (..., 5) ``xywhr`` → (..., 4) ``xyxy``."""
    corners = xywhr_to_corners(rboxes)
    return torch.cat((corners.amin(dim=-2), corners.amax(dim=-2)), dim=-1)


def xywhr_covariance(rboxes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Covariance of the uniform distribution over a rotated box (its Gaussian surrogate).

    A uniform box of side ``s`` has variance ``s^2 / 12``; rotating gives
    ``Sigma = R diag(w^2/12, h^2/12) R^T``.

    Args:
        rboxes: (..., 5) ``xywhr``.

    Returns:
        ``(a, b, c)`` each (...), with ``Sigma = [[a, c], [c, b]]`` in squared pixels.
    """
    var_w = rboxes[..., 2].pow(2) / 12
    var_h = rboxes[..., 3].pow(2) / 12
    cos, sin = torch.cos(rboxes[..., 4]), torch.sin(rboxes[..., 4])
    cos2, sin2 = cos.pow(2), sin.pow(2)
    return var_w * cos2 + var_h * sin2, var_w * sin2 + var_h * cos2, (var_w - var_h) * cos * sin


def probiou(rboxes1: Tensor, rboxes2: Tensor, eps: float = _EPS) -> Tensor:
    """ProbIoU of two broadcastable sets of rotated boxes.

    Aligned pairs are ``(..., 5)`` with ``(..., 5)`` (the loss); a pairwise matrix is
    ``(N, 1, 5)`` with ``(1, M, 5)`` (the assigner, NMS).

    The Bhattacharyya distance
    ``B = 1/8 dmu^T Sigma^-1 dmu + 1/2 ln(det Sigma / sqrt(det Sigma1 det Sigma2))`` with
    ``Sigma = (Sigma1 + Sigma2) / 2`` gives the Hellinger distance ``H = sqrt(1 - exp(-B))`` and
    ``ProbIoU = 1 - H``. ``B`` is clamped to ``[eps, 100]`` so the square root stays
    differentiable for identical boxes and far-apart pairs cannot overflow.

    Args:
        rboxes1: (..., 5) ``xywhr``.
        rboxes2: (..., 5) ``xywhr``, broadcastable against ``rboxes1``.
        eps: guards the determinants and the square root.

    Returns:
        (...) ProbIoU in [0, 1); ``1 - ProbIoU`` is the Hellinger distance.
    """
    a1, b1, c1 = xywhr_covariance(rboxes1)
    a2, b2, c2 = xywhr_covariance(rboxes2)
    a, b, c = (a1 + a2) / 2, (b1 + b2) / 2, (c1 + c2) / 2
    det = (a * b - c.pow(2)).clamp(min=eps)
    dx = rboxes1[..., 0] - rboxes2[..., 0]
    dy = rboxes1[..., 1] - rboxes2[..., 1]
    # dmu^T Sigma^-1 dmu with Sigma^-1 = [[b, -c], [-c, a]] / det
    mahalanobis = (b * dx.pow(2) + a * dy.pow(2) - 2 * c * dx * dy) / det
    det1 = (a1 * b1 - c1.pow(2)).clamp(min=0)
    det2 = (a2 * b2 - c2.pow(2)).clamp(min=0)
    log_term = torch.log(det / (torch.sqrt(det1 * det2) + eps))
    distance = (mahalanobis / 8 + log_term / 2).clamp(eps, 100.0)
    hellinger = torch.sqrt(1 - torch.exp(-distance) + eps)
    return 1 - hellinger


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
    "xywhr_covariance",
    "xywhr_to_corners",
    "xywhr_to_xyxy",
]
