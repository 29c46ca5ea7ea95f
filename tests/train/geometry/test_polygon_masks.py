"""Ground-truth masks from polygons at source resolution: pixel centres inside the polygon."""

from __future__ import annotations

import numpy as np
from faster_coco_eval.core import mask as coco_mask

from lucid_yolo.train.geometry import polygon_mask


def _coco(polygon: np.ndarray, height: int, width: int) -> np.ndarray:
    rle = coco_mask.frPyObjects([polygon.reshape(-1).tolist()], height, width)
    return np.asarray(coco_mask.decode(rle)[..., 0], dtype=bool)


def test_polygon_mask_rectangle_covers_exactly_its_pixels() -> None:
    mask = polygon_mask([[2.0, 3.0], [10.0, 3.0], [10.0, 8.0], [2.0, 8.0]], 12, 14)
    expected = np.zeros((12, 14), dtype=bool)
    expected[3:8, 2:10] = True
    assert np.array_equal(mask, expected)


def test_polygon_mask_counts_a_centre_on_an_edge_once() -> None:
    left = polygon_mask([[0.0, 0.0], [5.5, 0.0], [5.5, 4.0], [0.0, 4.0]], 4, 10)
    right = polygon_mask([[5.5, 0.0], [10.0, 0.0], [10.0, 4.0], [5.5, 4.0]], 4, 10)
    assert not (left & right).any()
    assert (left | right).all()


def test_polygon_mask_equals_coco_for_rectilinear_polygons_on_pixel_corners() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        x0, y0 = rng.integers(0, 40, 2)
        w, h = rng.integers(2, 30, 2)
        a, b = rng.integers(1, w), rng.integers(1, h)
        corners = [(x0, y0), (x0 + w, y0), (x0 + w, y0 + b), (x0 + a, y0 + b)]
        l_shape = np.array([*corners, (x0 + a, y0 + h), (x0, y0 + h)], dtype=np.float64)
        assert np.array_equal(polygon_mask(l_shape, 64, 80), _coco(l_shape, 64, 80))


def test_polygon_mask_is_close_to_coco_for_free_polygons() -> None:
    rng = np.random.default_rng(1)
    ious = []
    for _ in range(40):
        angles = np.sort(rng.uniform(0, 2 * np.pi, 9))
        radius = rng.uniform(8, 25) * rng.uniform(0.6, 1.0, 9)
        polygon = np.stack([40 + radius * np.cos(angles), 32 + radius * np.sin(angles)], axis=1)
        ours, reference = polygon_mask(polygon, 64, 80), _coco(polygon, 64, 80)
        ious.append((ours & reference).sum() / (ours | reference).sum())
    assert min(ious) > 0.9
    assert np.mean(ious) > 0.97


def test_polygon_mask_clips_to_the_image() -> None:
    mask = polygon_mask([[-5.0, -5.0], [3.0, -5.0], [3.0, 2.0], [-5.0, 2.0]], 6, 6)
    assert mask.sum() == 3 * 2
    assert mask[:2, :3].all()


def test_polygon_mask_of_a_degenerate_polygon_is_empty() -> None:
    assert not polygon_mask([[1.0, 1.0], [4.0, 1.0]], 5, 5).any()
    assert not polygon_mask([[1.0, 1.0], [4.0, 1.0], [2.0, 1.0]], 5, 5).any()
