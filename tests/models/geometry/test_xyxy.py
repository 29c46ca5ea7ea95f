"""Axis-aligned IoU and CIoU against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from lucid_yolo.models.geometry import box_area, box_ciou, box_iou


def test_box_area_inverted_box_is_zero() -> None:
    boxes = torch.tensor([[0.0, 0.0, 2.0, 3.0], [5.0, 5.0, 4.0, 9.0]])
    assert box_area(boxes).tolist() == [6.0, 0.0]


def test_box_iou_partial_overlap() -> None:
    iou = box_iou(torch.tensor([0.0, 0.0, 2.0, 2.0]), torch.tensor([1.0, 1.0, 3.0, 3.0]))
    assert iou.item() == pytest.approx(1 / 7)


def test_box_iou_broadcasts_to_pairwise_matrix() -> None:
    gts = torch.tensor([[0.0, 0.0, 2.0, 2.0], [10.0, 10.0, 12.0, 12.0]])
    preds = torch.tensor([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 3.0, 3.0], [10.0, 10.0, 12.0, 12.0]])
    iou = box_iou(gts[:, None], preds[None])
    expected = torch.tensor([[1.0, 1 / 7, 0.0], [0.0, 0.0, 1.0]])
    assert torch.allclose(iou, expected, atol=1e-6)


def test_box_iou_degenerate_pair_is_zero_not_nan() -> None:
    point = torch.tensor([1.0, 1.0, 1.0, 1.0])
    assert box_iou(point, point).item() == 0.0


def test_box_ciou_same_aspect_is_iou_minus_centre_term() -> None:
    ciou = box_ciou(torch.tensor([0.0, 0.0, 2.0, 2.0]), torch.tensor([1.0, 1.0, 3.0, 3.0]))
    # IoU 1/7, centres 2 apart squared, enclosing diagonal squared 18, equal aspect: v = 0.
    assert ciou.item() == pytest.approx(1 / 7 - 2 / 18, abs=1e-6)


def test_box_ciou_aspect_term_by_hand() -> None:
    ciou = box_ciou(torch.tensor([0.0, 0.0, 2.0, 1.0]), torch.tensor([0.0, 0.0, 1.0, 2.0]))
    iou = 1 / 3
    v = 4 / math.pi**2 * (math.atan(1 / 2) - math.atan(2 / 1)) ** 2
    alpha = v / (v - iou + 1)
    assert ciou.item() == pytest.approx(iou - 0.5 / 8 - alpha * v, abs=1e-6)


def test_box_ciou_identical_boxes_is_one() -> None:
    box = torch.tensor([3.0, 4.0, 10.0, 20.0])
    assert box_ciou(box, box).item() == pytest.approx(1.0, abs=1e-6)


def test_box_ciou_gradient_reaches_prediction() -> None:
    pred = torch.tensor([0.0, 0.0, 2.0, 1.0], requires_grad=True)
    (1 - box_ciou(pred, torch.tensor([0.5, 0.0, 1.5, 2.0]))).backward()
    assert pred.grad is not None
    assert torch.isfinite(pred.grad).all()
    assert pred.grad.abs().sum() > 0
