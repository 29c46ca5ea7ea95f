"""Rotated-box convention, corners, hull, containment and ProbIoU against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from lucid_yolo.models.geometry import (
    normalize_xywhr,
    points_in_xywhr,
    probiou,
    xywhr_covariance,
    xywhr_to_corners,
    xywhr_to_xyxy,
)


def test_normalize_xywhr_swaps_short_width_into_long_edge() -> None:
    out = normalize_xywhr(torch.tensor([0.0, 0.0, 2.0, 4.0, 0.0]))
    assert torch.allclose(out, torch.tensor([0.0, 0.0, 4.0, 2.0, math.pi / 2]), atol=1e-6)


def test_normalize_xywhr_wraps_angle_into_range() -> None:
    angles = torch.tensor([math.pi, 3 * math.pi / 4, -math.pi / 4, -math.pi / 2])
    boxes = torch.stack([torch.tensor([0.0, 0.0, 4.0, 2.0, float(a)]) for a in angles])
    out = normalize_xywhr(boxes)[:, 4]
    assert torch.allclose(
        out, torch.tensor([0.0, -math.pi / 4, -math.pi / 4, math.pi / 2]), atol=1e-6
    )


def test_xywhr_to_corners_quarter_turn() -> None:
    corners = xywhr_to_corners(torch.tensor([10.0, 20.0, 4.0, 2.0, math.pi / 2]))
    expected = torch.tensor([[11.0, 18.0], [11.0, 22.0], [9.0, 22.0], [9.0, 18.0]])
    assert torch.allclose(corners, expected, atol=1e-6)


def test_xywhr_to_corners_axis_aligned_starts_at_minimum_corner() -> None:
    corners = xywhr_to_corners(torch.tensor([10.0, 20.0, 4.0, 2.0, 0.0]))
    expected = torch.tensor([[8.0, 19.0], [12.0, 19.0], [12.0, 21.0], [8.0, 21.0]])
    torch.testing.assert_close(corners, expected)


def test_xywhr_to_corners_have_positive_area_w_times_h() -> None:
    corners = xywhr_to_corners(torch.tensor([[1.0, 2.0, 4.0, 3.0, 2.5]], dtype=torch.float64))
    x, y = corners[0, :, 0], corners[0, :, 1]
    signed = 0.5 * float((x * y.roll(-1) - x.roll(-1) * y).sum())
    assert signed == pytest.approx(12.0, abs=1e-12)


def test_xywhr_to_xyxy_of_square_at_45_degrees() -> None:
    hull = xywhr_to_xyxy(torch.tensor([[0.0, 0.0, 2.0, 2.0, math.pi / 4]]))
    r = math.sqrt(2)
    torch.testing.assert_close(hull, torch.tensor([[-r, -r, r, r]]))


def test_points_in_xywhr_follows_rotation() -> None:
    box = torch.tensor([10.0, 10.0, 8.0, 2.0, math.pi / 4])
    points = torch.tensor([[12.0, 12.0], [12.0, 8.0], [10.0, 10.0], [14.0, 10.0]])
    assert points_in_xywhr(points, box).tolist() == [True, False, True, False]


def test_points_in_xywhr_edge_point_is_outside() -> None:
    box = torch.tensor([0.0, 0.0, 4.0, 2.0, 0.0])
    assert not points_in_xywhr(torch.tensor([2.0, 0.0]), box).item()


def test_xywhr_covariance_rotated_box() -> None:
    a, b, c = xywhr_covariance(torch.tensor([0.0, 0.0, math.sqrt(12 * 4), math.sqrt(12), 0.5]))
    # diag(4, 1) rotated by 0.5 rad.
    cos, sin = math.cos(0.5), math.sin(0.5)
    assert a.item() == pytest.approx(4 * cos**2 + sin**2, rel=1e-6)
    assert b.item() == pytest.approx(4 * sin**2 + cos**2, rel=1e-6)
    assert c.item() == pytest.approx(3 * cos * sin, rel=1e-6)


def test_probiou_shifted_unit_covariance_by_hand() -> None:
    side = math.sqrt(12)  # covariance is the identity
    box1 = torch.tensor([0.0, 0.0, side, side, 0.0], dtype=torch.float64)
    box2 = torch.tensor([2.0, 0.0, side, side, 0.3], dtype=torch.float64)
    # B = 1/8 * |dmu|^2 = 0.5, log term 0 (same covariance, rotation-invariant square).
    expected = 1 - math.sqrt(1 - math.exp(-0.5))
    assert probiou(box1, box2).item() == pytest.approx(expected, abs=1e-6)


def test_probiou_identical_boxes_near_one() -> None:
    box = torch.tensor([5.0, 5.0, 30.0, 10.0, 1.0])
    assert probiou(box, box).item() == pytest.approx(1.0, abs=1e-3)


def test_probiou_same_centre_different_shape_by_hand() -> None:
    box1 = torch.tensor([0.0, 0.0, math.sqrt(12 * 4), math.sqrt(12), 0.0], dtype=torch.float64)
    box2 = torch.tensor([0.0, 0.0, math.sqrt(12), math.sqrt(12), 0.0], dtype=torch.float64)
    # Sigma1 = diag(4, 1), Sigma2 = I, mean diag(2.5, 1): B = 1/2 ln(2.5 / sqrt(4)).
    expected = 1 - math.sqrt(1 - math.exp(-0.5 * math.log(2.5 / 2)))
    assert probiou(box1, box2).item() == pytest.approx(expected, abs=1e-6)


def test_probiou_far_apart_is_finite_with_gradient() -> None:
    box1 = torch.tensor([0.0, 0.0, 2.0, 1.0, 0.0], requires_grad=True)
    box2 = torch.tensor([1e4, 1e4, 2.0, 1.0, 0.0])
    value = probiou(box1, box2)
    value.backward()
    assert value.item() == pytest.approx(0.0, abs=1e-3)
    assert box1.grad is not None
    assert torch.isfinite(box1.grad).all()


def test_probiou_pairwise_matrix_is_symmetric() -> None:
    generator = torch.Generator().manual_seed(0)
    boxes = torch.rand(6, 5, generator=generator) * torch.tensor([50, 50, 20, 20, 3]) + 1
    matrix = probiou(boxes[:, None], boxes[None])
    torch.testing.assert_close(matrix, matrix.T)


def test_xywhr_to_corners_equals_the_sign_table_bitwise() -> None:
    g = torch.Generator().manual_seed(0)
    rboxes = torch.randn(64, 5, generator=g, dtype=torch.float64) * 50
    rboxes[:4, 2:4] = 0.0  # degenerate sides, signed zeros
    signs = torch.tensor([[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]], dtype=torch.float64)
    u = signs[:, 0] * (rboxes[:, 2, None] / 2)
    v = signs[:, 1] * (rboxes[:, 3, None] / 2)
    cos, sin = torch.cos(rboxes[:, 4, None]), torch.sin(rboxes[:, 4, None])
    xs = rboxes[:, 0:1] + u * cos - v * sin
    ys = rboxes[:, 1:2] + u * sin + v * cos
    assert torch.equal(xywhr_to_corners(rboxes), torch.stack((xs, ys), dim=-1))


@pytest.mark.gpu
def test_xywhr_to_corners_on_cuda_does_not_wait_for_the_device() -> None:
    rboxes = torch.rand(8, 5, device="cuda") * 10
    xywhr_to_corners(rboxes)  # warm: first calls
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        corners = xywhr_to_corners(rboxes)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert corners.shape == (8, 4, 2)
