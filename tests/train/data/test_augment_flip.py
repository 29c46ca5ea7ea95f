"""Horizontal flip of every geometry, keypoint pairs and rotated-box angles."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rbox_corners import corner_array

from lucid_yolo.train.data.augment import Sample, corners_to_xywhr, flip_lr
from lucid_yolo.train.data.errors import DatasetConfigError


def _sample() -> Sample:
    rng = np.random.default_rng(0)
    keypoints = np.array([[[10, 12, 2], [30, 12, 2], [0, 0, 0]]], dtype=np.float32)
    return Sample(
        image=rng.integers(0, 255, (40, 64, 3), dtype=np.uint8),
        classes=np.array([0], dtype=np.int64),
        boxes=np.array([[8, 10, 32, 30]], dtype=np.float32),
        polygons=[np.array([[8, 10], [32, 10], [20, 30]], dtype=np.float32)],
        keypoints=keypoints,
        corners=corner_array(np.array([[20, 20, 16, 6, 0.4]], dtype=np.float32)),
    )


def test_flip_lr_twice_is_identity() -> None:
    sample = _sample()
    twice = flip_lr(flip_lr(sample, [1, 0, 2]), [1, 0, 2])
    np.testing.assert_array_equal(twice.image, sample.image)
    np.testing.assert_allclose(twice.boxes, sample.boxes)
    assert sample.polygons is not None
    assert twice.polygons is not None
    np.testing.assert_allclose(twice.polygons[0], sample.polygons[0])
    assert twice.keypoints is not None
    assert sample.keypoints is not None
    np.testing.assert_allclose(twice.keypoints, sample.keypoints)
    assert twice.corners is not None
    assert sample.corners is not None
    np.testing.assert_allclose(twice.corners, sample.corners)


def test_flip_lr_mirrors_image_and_box() -> None:
    sample = _sample()
    out = flip_lr(sample)
    np.testing.assert_array_equal(out.image, sample.image[:, ::-1])
    np.testing.assert_allclose(out.boxes, [[32, 10, 56, 30]])


def test_flip_lr_swaps_keypoint_pairs() -> None:
    out = flip_lr(_sample(), [1, 0, 2])
    assert out.keypoints is not None
    np.testing.assert_allclose(out.keypoints[0], [[34, 12, 2], [54, 12, 2], [0, 0, 0]])


def test_flip_lr_mirrors_obb_angle() -> None:
    sample = _sample()
    assert sample.corners is not None
    out = flip_lr(sample)
    assert out.corners is not None
    before, after = corners_to_xywhr(sample.corners)[0], corners_to_xywhr(out.corners)[0]
    np.testing.assert_allclose(after[:4], [64 - before[0], before[1], before[2], before[3]])
    assert math.isclose(math.remainder(after[4] + before[4], math.pi), 0.0, abs_tol=1e-5)


def test_flip_lr_rejects_bad_flip_idx() -> None:
    with pytest.raises(DatasetConfigError, match=r"flip_idx \[0, 0, 2\] is not a permutation"):
        flip_lr(_sample(), [0, 0, 2])
