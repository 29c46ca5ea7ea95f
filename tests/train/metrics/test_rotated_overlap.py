"""Exact rotated-rectangle IoU on hand cases, and against a raster estimate on random pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lucid_yolo.train.metrics import clip_convex, polygon_area, rotated_overlaps

NO_CROWD = torch.zeros(1, dtype=torch.bool)


def _iou(a: list[float], b: list[float], crowd: bool = False) -> float:
    flags = torch.tensor([crowd])
    pair = torch.tensor([a, b], dtype=torch.float64)
    return float(rotated_overlaps(pair[:1], pair[1:], flags)[0, 0])


def test_rotated_overlaps_identical_boxes_are_one() -> None:
    box = [10.0, 20.0, 8.0, 3.0, 0.7]
    assert _iou(box, box) == pytest.approx(1.0, abs=1e-12)


def test_rotated_overlaps_disjoint_boxes_are_zero() -> None:
    assert _iou([0.0, 0.0, 2.0, 2.0, 0.3], [10.0, 0.0, 2.0, 2.0, 1.1]) == 0.0


def test_rotated_overlaps_square_and_its_45_degree_turn() -> None:
    # the intersection is a regular octagon of area 8(√2 − 1); IoU = 1/√2
    iou = _iou([0.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0, math.pi / 4])
    assert iou == pytest.approx(1 / math.sqrt(2), abs=1e-12)


def test_rotated_overlaps_contained_box_is_area_ratio() -> None:
    iou = _iou([5.0, 5.0, 10.0, 10.0, 0.2], [5.0, 5.0, 2.0, 3.0, 1.0])
    assert iou == pytest.approx(6.0 / 100.0, abs=1e-12)


def test_rotated_overlaps_swapped_sides_and_quarter_turn_are_the_same_box() -> None:
    assert _iou(
        [3.0, 4.0, 6.0, 2.0, 0.1], [3.0, 4.0, 2.0, 6.0, 0.1 + math.pi / 2]
    ) == pytest.approx(1.0, abs=1e-12)


def test_rotated_overlaps_edge_sharing_boxes_touch_without_overlap() -> None:
    assert _iou([0.0, 0.0, 2.0, 2.0, 0.0], [2.0, 0.0, 2.0, 2.0, 0.0]) == pytest.approx(
        0.0, abs=1e-12
    )


def test_rotated_overlaps_half_shifted_box() -> None:
    # axis-aligned, shifted by half a side: intersection 2, union 6
    assert _iou([0.0, 0.0, 2.0, 2.0, 0.0], [1.0, 0.0, 2.0, 2.0, 0.0]) == pytest.approx(
        1 / 3, abs=1e-12
    )


def test_rotated_overlaps_crowd_divides_by_prediction_area() -> None:
    iou = _iou([5.0, 5.0, 2.0, 3.0, 0.4], [5.0, 5.0, 10.0, 10.0, 0.0], crowd=True)
    assert iou == pytest.approx(1.0, abs=1e-12)


def test_rotated_overlaps_unselected_pairs_are_zero() -> None:
    box = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0]])
    out = rotated_overlaps(box, box, NO_CROWD, pairs=torch.zeros(1, 1, dtype=torch.bool))
    assert out.item() == 0.0


def test_rotated_overlaps_chunking_does_not_change_values() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.cat([torch.rand(6, 2, generator=g) * 10, torch.rand(6, 3, generator=g) * 5 + 1], 1)
    b = torch.cat([torch.rand(5, 2, generator=g) * 10, torch.rand(5, 3, generator=g) * 5 + 1], 1)
    crowd = torch.zeros(5, dtype=torch.bool)
    assert torch.equal(rotated_overlaps(a, b, crowd, chunk=1), rotated_overlaps(a, b, crowd))


def _raster_iou(a: np.ndarray, b: np.ndarray, step: float) -> float:
    """IoU estimated on a fine pixel grid: point-in-rotated-rectangle counts."""
    xs = np.arange(-6.0, 16.0, step) + step / 2  # covers every test box
    x, y = np.meshgrid(xs, xs)

    def inside(r: np.ndarray) -> np.ndarray:
        dx, dy = x - r[0], y - r[1]
        u = dx * math.cos(r[4]) + dy * math.sin(r[4])
        v = -dx * math.sin(r[4]) + dy * math.cos(r[4])
        return np.asarray((np.abs(u) <= r[2] / 2) & (np.abs(v) <= r[3] / 2))

    ia, ib = inside(a), inside(b)
    return float((ia & ib).sum() / (ia | ib).sum())


def test_rotated_overlaps_match_a_raster_estimate() -> None:
    rng = np.random.default_rng(0)
    a = np.concatenate(
        [rng.uniform(3, 7, (8, 2)), rng.uniform(2, 8, (8, 2)), rng.uniform(-3, 3, (8, 1))], 1
    )
    b = a + np.concatenate([rng.normal(0, 1.5, (8, 4)), rng.uniform(-1, 1, (8, 1))], 1)
    b[:, 2:4] = np.abs(b[:, 2:4]) + 0.5
    exact = torch.diagonal(
        rotated_overlaps(torch.from_numpy(a), torch.from_numpy(b), NO_CROWD.expand(8))
    )
    raster = torch.tensor([_raster_iou(a[i], b[i], 0.025) for i in range(8)], dtype=torch.float64)
    assert (exact > 0.1).sum() >= 6, "most pairs should overlap"
    assert torch.allclose(exact, raster, atol=5e-3)


def test_polygon_area_ignores_slots_beyond_count() -> None:
    square = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [2.0, 2.0], [0.0, 2.0], [99.0, 99.0]]])
    assert polygon_area(square.double(), torch.tensor([4])).item() == pytest.approx(4.0)


def test_clip_convex_keeps_the_inner_half_of_a_square() -> None:
    square = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [2.0, 2.0], [0.0, 2.0]]], dtype=torch.float64)
    right_half = square.clone()
    right_half[0, :, 0] = right_half[0, :, 0] / 2 + 1  # x in [1, 2]
    vertices, count = clip_convex(square, torch.tensor([4]), right_half)
    assert polygon_area(vertices, count).item() == pytest.approx(2.0, abs=1e-12)
