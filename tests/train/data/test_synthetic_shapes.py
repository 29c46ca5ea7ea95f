"""Synthetic shape geometry: keypoints follow a left-right flip through ``flip_idx``."""

from __future__ import annotations

import numpy as np
import pytest

from lucid_yolo.train.data.synthetic_shapes import FLIP_IDX, SHAPE_CLASSES, ShapeInstance


@pytest.mark.parametrize("cls", range(len(SHAPE_CLASSES)))
def test_shape_instance_keypoints_flip_through_flip_idx(cls: int) -> None:
    width = 200.0
    shape = ShapeInstance(cls=cls, centre=(60.0, 80.0), radius=30.0, angle=0.4, aspect=1.2)
    mirrored = ShapeInstance(
        cls=cls, centre=(width - 60.0, 80.0), radius=30.0, angle=-0.4, aspect=1.2
    )
    flipped = shape.keypoints()[list(FLIP_IDX)]
    flipped[:, 0] = width - flipped[:, 0]
    np.testing.assert_allclose(flipped, mirrored.keypoints(), atol=1e-3)


def test_shape_instance_corners_are_a_rotated_rectangle() -> None:
    shape = ShapeInstance(cls=2, centre=(50.0, 50.0), radius=20.0, angle=0.7, aspect=2.0)
    corners = shape.corners().astype(np.float64)
    edges = np.roll(corners, -1, axis=0) - corners
    dots = (edges * np.roll(edges, -1, axis=0)).sum(axis=1)
    np.testing.assert_allclose(dots, 0.0, atol=1e-3)
    assert np.linalg.norm(edges[0]) == pytest.approx(2 * 20.0 * 2.0 * np.cos(np.pi / 6), rel=1e-5)


def test_shape_instance_upright_square_top_keypoint_is_edge_middle() -> None:
    shape = ShapeInstance(cls=1, centre=(50.0, 50.0), radius=10.0, angle=0.0, aspect=1.0)
    np.testing.assert_allclose(shape.keypoints()[0, :2], [50.0, 50.0 - 10 / np.sqrt(2)], atol=1e-4)
