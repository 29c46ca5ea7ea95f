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


def _edge_scene(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Predictions, targets, crowd flags and selected pairs of a scene full of edge cases.

    Around each random target: the same box, one sharing an edge, one touching at a corner, one
    inside it, the same box turned by π, -π, 2π and by π/2 with its sides swapped, boxes of zero
    width, height or both, and random boxes nearby; some targets are crowds, about one pair in
    five is left unselected.
    """
    g = torch.Generator().manual_seed(seed)
    targets = torch.cat(
        [
            torch.rand(6, 2, generator=g, dtype=torch.float64) * 40,
            torch.rand(6, 2, generator=g, dtype=torch.float64) * 10 + 0.5,
            (torch.rand(6, 1, generator=g, dtype=torch.float64) - 0.5) * 4 * math.pi,
        ],
        1,
    )
    preds = []
    for x, y, w, h, r in targets.tolist():
        along = (w * math.cos(r), w * math.sin(r))
        diagonal = (along[0] - h * math.sin(r), along[1] + h * math.cos(r))
        preds += [
            [x, y, w, h, r],
            [x + along[0], y + along[1], w, h, r],
            [x + diagonal[0], y + diagonal[1], w, h, r],
            [x, y, w / 3, h / 4, r + 0.4],
            [x, y, w, h, r + math.pi],
            [x, y, w, h, r - math.pi],
            [x, y, w, h, r + 2 * math.pi],
            [x, y, h, w, r + math.pi / 2],
            [x, y, 0.0, h, r],
            [x, y, w, 0.0, r],
            [x, y, 0.0, 0.0, r],
        ]
    noise = torch.randn(20, 5, generator=g, dtype=torch.float64) * torch.tensor(
        [4.0, 4.0, 2.0, 2.0, 1.0], dtype=torch.float64
    )
    nearby = targets[torch.randint(0, 6, (20,), generator=g)] + noise
    nearby[:, 2:4] = nearby[:, 2:4].abs()
    pred_rboxes = torch.cat([torch.tensor(preds, dtype=torch.float64), nearby])
    crowd = torch.rand(6, generator=g) < 0.3
    pairs = torch.rand(pred_rboxes.shape[0], 6, generator=g) < 0.8
    return pred_rboxes, targets, crowd, pairs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rotated_overlaps_clipping_every_pair_equals_clipping_the_candidates(seed: int) -> None:
    preds, targets, crowd, pairs = _edge_scene(seed)
    candidates = rotated_overlaps(preds, targets, crowd, pairs=pairs, compact=True)
    every_pair = rotated_overlaps(preds, targets, crowd, pairs=pairs, compact=False, chunk=37)
    assert ((candidates > 0) & (candidates < 1)).sum() >= 20, "the scene should overlap partly"
    assert (candidates == 0).sum() >= 20, "and hold disjoint, touching and unselected pairs"
    assert torch.equal(every_pair, candidates)


@pytest.mark.parametrize("compact", [True, False])
def test_rotated_overlaps_of_a_batch_equal_each_image_bitwise(compact: bool) -> None:
    scenes = [_edge_scene(seed) for seed in (4, 5)]
    preds, targets, crowd, pairs = (torch.stack(parts) for parts in zip(*scenes, strict=True))
    batched = rotated_overlaps(preds, targets, crowd, pairs=pairs, compact=compact, chunk=53)
    assert batched.shape == (2, preds.shape[1], targets.shape[1])
    for i, (p, t, c, selected) in enumerate(scenes):
        assert torch.equal(batched[i], rotated_overlaps(p, t, c, pairs=selected, compact=compact))


def test_rotated_overlaps_every_pair_path_zeroes_unselected_pairs() -> None:
    preds, targets, crowd, _ = _edge_scene(3)
    none = torch.zeros(preds.shape[0], targets.shape[0], dtype=torch.bool)
    assert not rotated_overlaps(preds, targets, crowd, pairs=none, compact=False).any()


def test_rotated_overlaps_every_pair_path_takes_empty_inputs() -> None:
    boxes = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0]], dtype=torch.float64)
    empty = boxes[:0]
    assert rotated_overlaps(boxes, empty, NO_CROWD[:0], compact=False).shape == (1, 0)
    assert rotated_overlaps(empty, boxes, NO_CROWD, compact=False).shape == (0, 1)


@pytest.mark.gpu
def test_rotated_overlaps_on_cuda_equal_the_cpu_candidates() -> None:
    preds, targets, crowd, pairs = _edge_scene(4)
    cpu = rotated_overlaps(preds, targets, crowd, pairs=pairs)
    cuda = rotated_overlaps(preds.cuda(), targets.cuda(), crowd.cuda(), pairs=pairs.cuda())
    assert torch.allclose(cuda.cpu(), cpu, rtol=0.0, atol=1e-12)
