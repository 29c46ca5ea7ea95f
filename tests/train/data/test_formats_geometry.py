"""Shared parser geometry: range checks and multi-part polygon merging."""

from __future__ import annotations

import cv2
import numpy as np

from lucid_yolo.train.data.formats.geometry import (
    hull_box,
    merge_polygon_parts,
    out_of_range,
    out_of_range_index,
)


def test_out_of_range_accepts_values_within_tolerance() -> None:
    assert out_of_range(np.array([-0.005, 1.005, 0.5], np.float32)) is None


def test_out_of_range_returns_first_bad_value_and_index() -> None:
    values = np.array([[0.5, 1.2], [np.nan, -0.3]], np.float32)
    assert out_of_range(values) == np.float32(1.2)
    assert out_of_range_index(values) == 1


def test_hull_box_is_clipped() -> None:
    points = np.array([[-0.005, 0.2], [0.4, 1.004]], np.float32)
    np.testing.assert_allclose(hull_box(points), [0.0, 0.2, 0.4, 1.0])


def test_merge_polygon_parts_fills_the_union() -> None:
    left = np.array([[2, 2], [10, 2], [10, 10], [2, 10]], np.float32)
    right = np.array([[20, 20], [30, 20], [30, 30], [20, 30]], np.float32)
    merged = merge_polygon_parts([left, right])
    assert merged.shape == (4 + 4 + 2, 2)
    filled = np.zeros((40, 40), np.uint8)
    cv2.fillPoly(filled, [merged.astype(np.int32)], 1)
    expected = np.zeros((40, 40), np.uint8)
    cv2.fillPoly(expected, [left.astype(np.int32), right.astype(np.int32)], 1)
    bridge = (filled != expected).sum()
    assert filled[5, 5] == 1
    assert filled[25, 25] == 1
    assert bridge <= 2 * 15  # only the one-pixel-wide bridge line differs


def test_merge_polygon_parts_single_part_is_unchanged() -> None:
    part = np.array([[0, 0], [1, 0], [0, 1]], np.float32)
    np.testing.assert_array_equal(merge_polygon_parts([part]), part)
