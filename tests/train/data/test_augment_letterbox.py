"""Letterbox forward and its inverse used by metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lucid_yolo.train.data.augment import (
    PAD_VALUE,
    Sample,
    letterbox,
    resize_long_side,
    unletterbox_boxes,
    unletterbox_points,
    unletterbox_rboxes,
)
from lucid_yolo.train.data.augment.sample import sample_from_labels
from lucid_yolo.train.data.labels import ImageLabels


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


def test_resize_long_side_scales_both_axes_by_the_long_side_ratio() -> None:
    # 80 x 100 at 96 px: 96 / 100 = 0.96 on both axes; the short side holds 76.8 pixels of
    # content in 77 rows. A white block on source rows 50-70 and columns 10-30 must have its
    # centroid at 0.96 x (60, 20) = (57.6, 19.2), not stretched to 77 / 80 on the short axis
    # (57.75) as a resize to the rounded size would.
    image = np.zeros((80, 100, 3), np.uint8)
    image[50:70, 10:30] = 255
    resized = resize_long_side(image, 96)
    assert resized.shape == (77, 96, 3)
    weight = resized[..., 0].astype(np.float64)
    rows, cols = np.indices(weight.shape) + 0.5
    centroid = ((rows * weight).sum() / weight.sum(), (cols * weight).sum() / weight.sum())
    assert abs(centroid[0] - 57.6) < 0.02
    assert abs(centroid[1] - 19.2) < 0.02


def test_boxes_of_an_image_whose_short_side_rounds_map_back_exactly() -> None:
    labels = ImageLabels(
        image_path=Path("a.png"),
        classes=np.zeros(1, dtype=np.int64),
        boxes=np.array([[0.1, 0.25, 0.9, 0.975]], dtype=np.float32),  # 10, 20, 90, 78 source px
    )
    resized = resize_long_side(np.zeros((80, 100, 3), np.uint8), 96)
    sample = letterbox(sample_from_labels(resized, labels, 0, (80, 100)), 96)
    source = unletterbox_boxes(
        torch.from_numpy(sample.boxes)[None], torch.tensor([sample.scale_pad])
    )[0]
    torch.testing.assert_close(source, torch.tensor([[10.0, 20.0, 90.0, 78.0]]))
