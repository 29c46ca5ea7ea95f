"""Anchor grid and the distance/box transforms."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.models import distances_to_xyxy, make_anchors, xyxy_to_distances


def test_make_anchors_cell_centres_in_level_order() -> None:
    points, strides = make_anchors([(2, 3), (1, 1)], [8, 16])
    assert points.shape == (7, 2)
    assert strides.squeeze(1).tolist() == [8.0] * 6 + [16.0]
    assert points[0].tolist() == [4.0, 4.0]
    assert points[2].tolist() == [20.0, 4.0]
    assert points[3].tolist() == [4.0, 12.0]
    assert points[6].tolist() == [8.0, 8.0]


def test_make_anchors_rejects_mismatched_levels() -> None:
    with pytest.raises(ValueError, match="one stride per level"):
        make_anchors([(2, 2)], [8, 16])


def test_distances_round_trip() -> None:
    points, _ = make_anchors([(4, 4)], [8])
    boxes = torch.tensor([[2.0, 3.0, 30.0, 29.0]]).expand(16, 4)
    distances = xyxy_to_distances(boxes, points)
    assert torch.equal(distances_to_xyxy(distances, points), boxes)
