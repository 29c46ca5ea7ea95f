"""Letterbox forward and its inverse used by metrics."""

from __future__ import annotations

import numpy as np
import torch

from lucid_yolo.train.data.augment import (
    PAD_VALUE,
    Sample,
    letterbox,
    unletterbox_boxes,
    unletterbox_points,
    unletterbox_rboxes,
)


def _sample(h: int, w: int, boxes: list[list[float]]) -> Sample:
    return Sample(
        image=np.zeros((h, w, 3), dtype=np.uint8),
        classes=np.arange(len(boxes), dtype=np.int64),
        boxes=np.array(boxes, dtype=np.float32).reshape(-1, 4),
        orig_size=(h, w),
    )


def test_letterbox_pads_short_side_centred() -> None:
    out = letterbox(_sample(100, 200, [[0, 0, 200, 100]]), 64)
    assert out.image.shape == (64, 64, 3)
    assert out.scale_pad == (0.32, 0.0, 16.0)
    assert (out.image[:16] == PAD_VALUE).all()
    assert (out.image[16:48] == 0).all()
    np.testing.assert_allclose(out.boxes, [[0, 16, 64, 48]])


def test_letterbox_round_trip_boxes() -> None:
    boxes = [[10.5, 20.0, 150.0, 90.0], [0.0, 0.0, 3.0, 7.0]]
    out = letterbox(_sample(120, 300, boxes), 640)
    back = unletterbox_boxes(torch.from_numpy(out.boxes), torch.tensor(out.scale_pad))
    torch.testing.assert_close(back, torch.tensor(boxes), atol=1e-4, rtol=0)


def test_letterbox_composes_with_previous_scale() -> None:
    sample = _sample(50, 100, [[10, 10, 20, 20]])
    sample.scale_pad = (0.5, 0.0, 0.0)
    out = letterbox(sample, 64)
    source = torch.tensor([[20.0, 20.0, 40.0, 40.0]])
    back = unletterbox_boxes(torch.from_numpy(out.boxes), torch.tensor(out.scale_pad))
    torch.testing.assert_close(back, source, atol=1e-4, rtol=0)


def test_unletterbox_points_batched() -> None:
    points = torch.tensor([[[10.0, 20.0]], [[10.0, 20.0]]])
    scale_pad = torch.tensor([[2.0, 0.0, 4.0], [1.0, 10.0, 0.0]])
    back = unletterbox_points(points, scale_pad)
    assert back.tolist() == [[[5.0, 8.0]], [[0.0, 20.0]]]


def test_unletterbox_rboxes_keeps_angle() -> None:
    rboxes = torch.tensor([[[20.0, 30.0, 10.0, 4.0, 0.7]]])
    back = unletterbox_rboxes(rboxes, torch.tensor([[2.0, 4.0, 6.0]]))
    torch.testing.assert_close(back, torch.tensor([[[8.0, 12.0, 5.0, 2.0, 0.7]]]))
