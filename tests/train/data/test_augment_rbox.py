"""Rotated boxes: corners <-> xywhr in the long-edge convention."""

from __future__ import annotations

import math

import numpy as np
from rbox_corners import corner_array

from lucid_yolo.train.data.augment import canonical_xywhr, corners_to_xywhr


def _same_rectangle(a: np.ndarray, b: np.ndarray) -> bool:
    """Corners equal as point sets (any starting corner or winding)."""
    return all(
        np.abs(a[i][:, None, :] - b[i][None, :, :]).sum(-1).min(axis=1).max() < 1e-3
        for i in range(a.shape[0])
    )


def test_corners_to_xywhr_round_trip_many_angles() -> None:
    angles = np.linspace(-3 * math.pi, 3 * math.pi, 97)
    rboxes = np.array([[50.0, 40.0, 30.0, 10.0, a] for a in angles], dtype=np.float32)
    corners = corner_array(rboxes)
    back = corners_to_xywhr(corners)
    assert _same_rectangle(corner_array(back), corners)
    np.testing.assert_allclose(back[:, :4], rboxes[:, :4], atol=1e-3)


def test_corners_to_xywhr_angle_in_range() -> None:
    rng = np.random.default_rng(0)
    rboxes = np.column_stack(
        [rng.uniform(0, 100, (500, 2)), rng.uniform(1, 50, (500, 2)), rng.uniform(-10, 10, 500)]
    ).astype(np.float32)
    out = corners_to_xywhr(corner_array(rboxes))
    assert (out[:, 4] >= np.float32(-math.pi / 4)).all()
    assert (out[:, 4] < 3 * math.pi / 4).all()
    assert (out[:, 2] >= out[:, 3]).all()


def test_corners_to_xywhr_long_edge_vertical() -> None:
    corners = np.array([[[10, 0], [20, 0], [20, 40], [10, 40]]], dtype=np.float32)
    out = corners_to_xywhr(corners)
    np.testing.assert_allclose(out[0], [15, 20, 40, 10, math.pi / 2], atol=1e-5)


def test_corners_to_xywhr_either_winding() -> None:
    corners = corner_array(np.array([[0, 0, 20, 5, 0.3]], dtype=np.float32))
    np.testing.assert_allclose(
        corners_to_xywhr(corners), corners_to_xywhr(corners[:, ::-1].copy()), atol=1e-5
    )


def test_corners_to_xywhr_parallelogram_min_area() -> None:
    sheared = np.array([[[0, 0], [10, 0], [14, 10], [4, 10]]], dtype=np.float32)
    out = corners_to_xywhr(sheared)
    area = out[0, 2] * out[0, 3]
    assert area <= 14 * 10 + 1e-3
    hull = corner_array(out)[0]
    for p in sheared[0]:
        rel = p - out[0, :2]
        u = np.array([math.cos(out[0, 4]), math.sin(out[0, 4])])
        assert abs(rel @ u) <= out[0, 2] / 2 + 1e-3
    assert hull.shape == (4, 2)


def test_canonical_xywhr_square_angle_quarter_range() -> None:
    out = canonical_xywhr(np.array([[0, 0, 8, 8, 1.2]], dtype=np.float32))
    assert -math.pi / 4 <= out[0, 4] < math.pi / 4
    np.testing.assert_allclose(out[0, 4], 1.2 - math.pi / 2, atol=1e-6)


def test_corners_to_xywhr_empty() -> None:
    assert corners_to_xywhr(np.zeros((0, 4, 2), dtype=np.float32)).shape == (0, 5)
