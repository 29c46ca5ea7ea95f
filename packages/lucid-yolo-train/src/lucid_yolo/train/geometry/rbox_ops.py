"""Rotated-box helpers (``xywhr``): angle convention, corners, containment and ProbIoU.

An ``xywhr`` box is ``(cx, cy, w, h, r)``: centre and size in pixels, ``r`` the rotation in radians
of the box's ``w`` axis from the image ``x`` axis (counter-clockwise in a y-down image, i.e.
clockwise on screen). The project's convention is **long-edge**: ``w >= h`` and
``r in [-pi/4, 3pi/4)``, one representative per physical box (a rotation by ``pi`` is the same
box), which is also the range the OBB head decodes to (``(sigmoid - 0.25) * pi``).

All functions broadcast over leading dimensions and are free of host syncs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_EPS = 1e-7
_ANGLE_LOW = -math.pi / 4


def normalize_xywhr(rboxes: Tensor) -> Tensor:
    """Rewrite rotated boxes in the long-edge convention (``w >= h``, ``r in [-pi/4, 3pi/4)``).

    Args:
        rboxes: (..., 5) ``xywhr`` in any convention.

    Returns:
        (..., 5) the same physical boxes, ``w >= h`` and ``r`` wrapped into ``[-pi/4, 3pi/4)``.
    """
    width, height, angle = rboxes[..., 2], rboxes[..., 3], rboxes[..., 4]
    swap = height > width
    long_side = torch.where(swap, height, width)
    short_side = torch.where(swap, width, height)
    angle = torch.where(swap, angle + math.pi / 2, angle)
    angle = torch.remainder(angle - _ANGLE_LOW, math.pi) + _ANGLE_LOW
    return torch.stack((rboxes[..., 0], rboxes[..., 1], long_side, short_side, angle), dim=-1)


def xywhr_to_corners(rboxes: Tensor) -> Tensor:
    """Corner points of rotated boxes.

    Args:
        rboxes: (..., 5) ``xywhr``.

    Returns:
        (..., 4, 2) corners ``xy`` in the order (+w/2, +h/2), (-w/2, +h/2), (-w/2, -h/2),
        (+w/2, -h/2) of the box frame, i.e. a consistent winding.
    """
    centre = rboxes[..., None, :2]
    cos, sin = torch.cos(rboxes[..., 4]), torch.sin(rboxes[..., 4])
    half_w, half_h = rboxes[..., 2] / 2, rboxes[..., 3] / 2
    signs = rboxes.new_tensor([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]])
    local_x = signs[:, 0] * half_w[..., None]  # (..., 4)
    local_y = signs[:, 1] * half_h[..., None]
    x = local_x * cos[..., None] - local_y * sin[..., None]
    y = local_x * sin[..., None] + local_y * cos[..., None]
    return torch.stack((x, y), dim=-1) + centre


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


def rbox_covariance(rboxes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
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
    """ProbIoU of rotated boxes (Llerena et al., 2021, arXiv:2106.06072).

    Each box becomes a Gaussian (its centre, :func:`rbox_covariance`); the Bhattacharyya distance
    ``B = 1/8 dmu^T Sigma^-1 dmu + 1/2 ln(det Sigma / sqrt(det Sigma1 det Sigma2))`` with
    ``Sigma = (Sigma1 + Sigma2) / 2`` gives the Hellinger distance ``H = sqrt(1 - exp(-B))`` and
    ``ProbIoU = 1 - H``. ``B`` is clamped to ``[eps, 100]`` so the square root stays
    differentiable for identical boxes and far-apart pairs cannot overflow.

    Args:
        rboxes1: (..., 5) ``xywhr``.
        rboxes2: (..., 5) ``xywhr``, broadcastable against ``rboxes1``.
        eps: guards the determinants and the square root.

    Returns:
        (...) ProbIoU in [0, 1); the loss is ``1 - ProbIoU`` (the Hellinger distance).
    """
    a1, b1, c1 = rbox_covariance(rboxes1)
    a2, b2, c2 = rbox_covariance(rboxes2)
    a, b, c = (a1 + a2) / 2, (b1 + b2) / 2, (c1 + c2) / 2
    det = (a * b - c.pow(2)).clamp(min=eps)
    dx = rboxes1[..., 0] - rboxes2[..., 0]
    dy = rboxes1[..., 1] - rboxes2[..., 1]
    mahalanobis = (b * dx.pow(2) + a * dy.pow(2) - 2 * c * dx * dy) / det
    det1 = (a1 * b1 - c1.pow(2)).clamp(min=0)
    det2 = (a2 * b2 - c2.pow(2)).clamp(min=0)
    log_term = torch.log(det / (torch.sqrt(det1 * det2) + eps))
    distance = (mahalanobis / 8 + log_term / 2).clamp(eps, 100.0)
    hellinger = torch.sqrt(1 - torch.exp(-distance) + eps)
    return 1 - hellinger


__all__ = [
    "normalize_xywhr",
    "points_in_xywhr",
    "probiou",
    "rbox_covariance",
    "xywhr_to_corners",
]
