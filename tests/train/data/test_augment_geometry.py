"""Polygon clipping and the keep rule."""

from __future__ import annotations

import numpy as np

from lucid_yolo.train.data.augment import DropCounts, KeepRule, clip_polygon
from lucid_yolo.train.data.augment.geometry import keep_mask


def _area(p: np.ndarray) -> float:
    x, y = p[:, 0], p[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def test_clip_polygon_inside_unchanged() -> None:
    square = np.array([[1, 1], [5, 1], [5, 5], [1, 5]], dtype=np.float32)
    np.testing.assert_array_equal(clip_polygon(square, 10, 10), square)


def test_clip_polygon_on_the_border_unchanged() -> None:
    square = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], dtype=np.float32)
    clipped = clip_polygon(square, 10, 10)
    assert clipped.dtype == np.float32
    np.testing.assert_array_equal(clipped, square)


def test_clip_polygon_straddling_corner_keeps_visible_area() -> None:
    square = np.array([[-5, -5], [5, -5], [5, 5], [-5, 5]], dtype=np.float32)
    clipped = clip_polygon(square, 10, 10)
    assert _area(clipped) == 25.0
    assert clipped.min() == 0.0


def test_clip_polygon_triangle_cut_by_edge() -> None:
    triangle = np.array([[0, 0], [20, 0], [0, 20]], dtype=np.float32)
    clipped = clip_polygon(triangle, 10, 100)
    np.testing.assert_allclose(_area(clipped), 200 - 50, atol=1e-4)


def test_clip_polygon_fully_outside_is_empty() -> None:
    square = np.array([[20, 20], [30, 20], [30, 30]], dtype=np.float32)
    assert clip_polygon(square, 10, 10).shape == (0, 2)


def test_keep_mask_counts_each_reason() -> None:
    visible = np.array(
        [[0, 0, 10, 10], [0, 0, 1, 10], [0, 0, 10, 10], [0, 0, 100, 3]], dtype=np.float32
    )
    warped = np.array(
        [[0, 0, 10, 10], [0, 0, 1, 10], [-100, 0, 10, 100], [0, 0, 100, 3]], dtype=np.float32
    )
    drops = DropCounts()
    keep = keep_mask(visible, warped, KeepRule(), drops)
    assert keep.tolist() == [True, False, False, False]
    assert (drops.too_small, drops.outside, drops.degenerate) == (1, 1, 1)
    assert drops.total() == 3
