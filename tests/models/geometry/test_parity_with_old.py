"""Old geometry homes vs lucid_yolo.models.geometry on random inputs (goes with the old)."""

from __future__ import annotations

import math

import numpy as np
import torch

from lucid_yolo.models import decode
from lucid_yolo.models import geometry as new
from lucid_yolo.train.data.augment import rbox as numpy_rbox
from lucid_yolo.train.geometry import box_ops, rbox_ops
from lucid_yolo.train.metrics import rotated_overlap

_N = 4096


def _xyxy(generator: torch.Generator) -> torch.Tensor:
    top_left = torch.rand(_N, 2, generator=generator) * 640
    size = torch.rand(_N, 2, generator=generator) * 200
    return torch.cat((top_left, top_left + size), dim=1)


def _xywhr(generator: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    centre = torch.rand(_N, 2, generator=generator) * 640
    size = torch.rand(_N, 2, generator=generator) * 300 + 0.5
    angle = (torch.rand(_N, 1, generator=generator) - 0.5) * 4 * math.pi
    return torch.cat((centre, size, angle), dim=1).to(dtype)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1), b.view(-1))


def test_box_iou_matches_train_form_bitwise() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = _xyxy(g), _xyxy(g)
    assert _same_bits(new.box_iou(a, b), box_ops.box_iou(a, b))
    pairwise = (a[:64, None], b[None, :64])
    assert _same_bits(new.box_iou(*pairwise), box_ops.box_iou(*pairwise))
    assert _same_bits(new.box_ciou(a, b), box_ops.box_ciou(a, b))
    assert _same_bits(new.box_area(a), box_ops.box_area(a))


def test_box_iou_nms_keeps_the_same_boxes_as_the_old_nms_form() -> None:
    g = torch.Generator().manual_seed(1)
    boxes = _xyxy(g)[:512]
    scores = torch.rand(512, generator=g)
    classes = torch.randint(0, 3, (512,), generator=g)
    old = decode.nms(boxes, scores, classes, 0.5, overlap=decode.box_iou)
    unified = decode.nms(
        boxes, scores, classes, 0.5, overlap=lambda x, y: new.box_iou(x[:, None], y[None])
    )
    assert torch.equal(old, unified)
    delta = new.box_iou(boxes[:, None], boxes[None]) - decode.box_iou(boxes, boxes)
    assert delta.abs().max() <= 1e-6


def test_rotated_functions_match_the_decoder_bitwise() -> None:
    g = torch.Generator().manual_seed(2)
    a, b = _xywhr(g), _xywhr(g)
    assert _same_bits(new.normalize_xywhr(a), decode.regularize_rboxes(a))
    assert _same_bits(new.xywhr_to_xyxy(a), decode.rbox_hull(a))
    assert _same_bits(new.probiou(a, b), decode.probiou_aligned(a, b))
    assert _same_bits(new.probiou(a[:64, None], b[None, :64]), decode.probiou(a[:64], b[:64]))
    for old_part, new_part in zip(decode.rbox_covariance(a), new.xywhr_covariance(a), strict=True):
        assert _same_bits(new_part, old_part)
    old_order = decode.rbox_corners(a)[:, [2, 3, 0, 1]]  # same cycle, other start corner
    assert _same_bits(new.xywhr_to_corners(a), old_order)


def test_corners_match_the_metric_form_bitwise() -> None:
    g = torch.Generator().manual_seed(3)
    a = _xywhr(g)
    old = rotated_overlap.rboxes_to_corners(a)
    assert _same_bits(new.xywhr_to_corners(a.to(torch.float64)), old)


def test_corners_match_the_numpy_form_bitwise_in_float32() -> None:
    g = torch.Generator().manual_seed(4)
    a = _xywhr(g)
    old = numpy_rbox.xywhr_to_corners(a.numpy())
    unified = new.xywhr_to_corners(a.to(torch.float64)).to(torch.float32).numpy()
    assert np.array_equal(old.view(np.int32), unified.view(np.int32))


def test_points_in_xywhr_matches_train_form() -> None:
    g = torch.Generator().manual_seed(5)
    a = _xywhr(g)[:64]
    points = torch.rand(256, 2, generator=g) * 640
    assert torch.equal(
        new.points_in_xywhr(points, a[:, None]), rbox_ops.points_in_xywhr(points, a[:, None])
    )
