"""Mosaic, mixup and copy-paste: instance counts and geometry on the combined canvas."""

from __future__ import annotations

import numpy as np
import pytest

from lucid_yolo.train.data.augment import KeepRule, Sample, copy_paste, mixup, mosaic4


def _tile(value: int, n: int, size: int = 64, polygons: bool = False) -> Sample:
    boxes = np.array([[8 + 10 * i, 8, 16 + 10 * i, 20] for i in range(n)], dtype=np.float32)
    return Sample(
        image=np.full((size, size, 3), value, dtype=np.uint8),
        classes=np.full(n, value, dtype=np.int64),
        boxes=boxes.reshape(-1, 4),
        polygons=[b[[0, 1, 2, 1, 2, 3, 0, 3]].reshape(4, 2) for b in boxes] if polygons else None,
        image_id=value,
    )


def test_mosaic4_keeps_all_instances_inside_canvas() -> None:
    tiles = [_tile(v, 2) for v in (1, 2, 3, 4)]
    out = mosaic4(tiles, 64, KeepRule(), np.random.default_rng(0))
    assert out.image.shape == (128, 128, 3)
    assert len(out) + out.drops.total() == 8
    assert out.image_id == 1
    for cls, box in zip(out.classes, out.boxes, strict=True):
        x1, y1, x2, y2 = box.astype(int)
        assert (out.image[y1:y2, x1:x2, 0] == cls).all()


def test_mosaic4_ignore_flags_stay_with_their_instances() -> None:
    tiles = [_tile(v, 2) for v in (1, 2, 3, 4)]
    tiles[2].ignore = np.array([True, True])
    out = mosaic4(tiles, 64, KeepRule(), np.random.default_rng(0))
    assert len(out) > 0
    np.testing.assert_array_equal(out.ignore_flags(), out.classes == 3)


def test_mixup_ignore_flags_of_one_side_default_false_on_the_other() -> None:
    hard = _tile(200, 3)
    hard.ignore = np.array([False, True, False])
    out = mixup(_tile(0, 2), hard, np.random.default_rng(0))
    assert out.ignore_flags().tolist() == [False, False, False, True, False]


def test_mosaic4_rejects_three_tiles() -> None:
    with pytest.raises(ValueError, match="mosaic4 takes 4 tiles, got 3"):
        mosaic4([_tile(1, 1)] * 3, 64, KeepRule(), np.random.default_rng(0))


def test_mixup_label_count_is_sum() -> None:
    out = mixup(_tile(0, 2), _tile(200, 3), np.random.default_rng(0))
    assert len(out) == 5
    assert out.classes.tolist() == [0, 0, 200, 200, 200]
    assert 60 < int(out.image[0, 0, 0]) < 140


def test_mixup_rejects_size_mismatch() -> None:
    with pytest.raises(ValueError, match="mixup needs equal image shapes"):
        mixup(_tile(0, 1, 64), _tile(0, 1, 32), np.random.default_rng(0))


def test_copy_paste_adds_mirrored_instances() -> None:
    sample = _tile(0, 1, polygons=True)
    sample.image[8:20, 8:16] = 255
    out = copy_paste(sample, 1.0, np.random.default_rng(0))
    assert len(out) == 2
    np.testing.assert_allclose(out.boxes[1], [48, 8, 56, 20])
    assert (out.image[8:20, 48:56] == 255).all()


def test_copy_paste_is_noop_without_polygons() -> None:
    sample = _tile(0, 2)
    assert copy_paste(sample, 1.0, np.random.default_rng(0)) is sample
