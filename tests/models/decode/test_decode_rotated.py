"""Rotated-box convention, corners, hull and ProbIoU."""

from __future__ import annotations

import math

import torch

from lucid_yolo.models.decode import probiou, rbox_corners, rbox_hull, regularize_rboxes


def test_regularize_rboxes_swaps_short_width() -> None:
    result = regularize_rboxes(torch.tensor([[0.0, 0.0, 10.0, 20.0, 0.0]]))
    torch.testing.assert_close(result, torch.tensor([[0.0, 0.0, 20.0, 10.0, math.pi / 2]]))


def test_regularize_rboxes_wraps_angle_into_range() -> None:
    result = regularize_rboxes(torch.tensor([[0.0, 0.0, 20.0, 10.0, math.pi]]))
    torch.testing.assert_close(result[0, 4], torch.tensor(0.0), atol=1e-6, rtol=0)


def test_rbox_corners_of_axis_aligned_box() -> None:
    corners = rbox_corners(torch.tensor([10.0, 20.0, 4.0, 2.0, 0.0]))
    expected = torch.tensor([[12.0, 21.0], [8.0, 21.0], [8.0, 19.0], [12.0, 19.0]])
    torch.testing.assert_close(corners, expected)


def test_rbox_hull_of_square_at_45_degrees() -> None:
    hull = rbox_hull(torch.tensor([[0.0, 0.0, 2.0, 2.0, math.pi / 4]]))
    r = math.sqrt(2)
    torch.testing.assert_close(hull, torch.tensor([[-r, -r, r, r]]))


def test_probiou_identical_boxes_near_one() -> None:
    boxes = torch.tensor([[5.0, 5.0, 30.0, 10.0, 0.4], [80.0, 20.0, 8.0, 8.0, 0.0]])
    assert (probiou(boxes, boxes).diagonal() > 0.99).all()


def test_probiou_distant_boxes_near_zero() -> None:
    a = torch.tensor([[0.0, 0.0, 10.0, 10.0, 0.0]])
    b = torch.tensor([[500.0, 0.0, 10.0, 10.0, 0.0]])
    assert probiou(a, b).item() < 1e-3


def test_probiou_is_symmetric() -> None:
    generator = torch.Generator().manual_seed(0)
    boxes = torch.rand(6, 5, generator=generator) * torch.tensor([50, 50, 20, 20, 3]) + 1
    matrix = probiou(boxes, boxes)
    torch.testing.assert_close(matrix, matrix.T)
