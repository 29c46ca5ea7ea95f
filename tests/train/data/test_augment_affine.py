"""Random affine: labels stay consistent with the warped pixels, drops are counted."""

from __future__ import annotations

import cv2
import numpy as np
from rbox_corners import corner_array

from lucid_yolo.train.data.augment import (
    KeepRule,
    Sample,
    random_affine,
    to_targets,
    warp_sample,
)

SIZE = 128
RULE = KeepRule()


def _white_box(image: np.ndarray) -> np.ndarray:
    ys, xs = np.nonzero(image[..., 0] > 127)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=np.float32)


def _fill(polygon: np.ndarray) -> np.ndarray:
    """(SIZE, SIZE) uint8 coverage of a polygon in pixel-edge coordinates, 8x supersampled."""
    fine = np.zeros((SIZE * 8, SIZE * 8), dtype=np.uint8)
    cv2.fillPoly(fine, [np.round((polygon * 8 - 0.5) * 16).astype(np.int32)], 255, shift=4)
    return np.asarray(cv2.resize(fine, (SIZE, SIZE), interpolation=cv2.INTER_AREA))


def _polygon_sample(polygon: np.ndarray) -> Sample:
    image = np.repeat(_fill(polygon)[..., None], 3, axis=2)
    box = np.concatenate([polygon.min(0), polygon.max(0)])[None].astype(np.float32)
    return Sample(image=image, classes=np.zeros(1, dtype=np.int64), boxes=box, polygons=[polygon])


def _warp(sample: Sample, seed: int, degrees: float = 30, shear: float = 10) -> Sample:
    return random_affine(
        sample,
        (SIZE, SIZE),
        degrees=degrees,
        scale=0.3,
        shear=shear,
        translate=0.05,
        rule=RULE,
        rng=np.random.default_rng(seed),
    )


def test_random_affine_polygon_box_matches_warped_pixels() -> None:
    polygon = np.array([[40, 30], [90, 45], [70, 95], [35, 80]], dtype=np.float32)
    for seed in range(5):
        out = _warp(_polygon_sample(polygon), seed)
        assert len(out) == 1
        np.testing.assert_allclose(out.boxes[0], _white_box(out.image), atol=1.5)


def test_random_affine_box_only_bounds_warped_pixels() -> None:
    sample = _polygon_sample(np.array([[40, 30], [90, 30], [90, 80], [40, 80]], dtype=np.float32))
    sample.polygons = None
    for seed in range(5):
        out = _warp(sample, seed)
        white = _white_box(out.image)
        assert (out.boxes[0, :2] <= white[:2] + 1).all()
        assert (out.boxes[0, 2:] >= white[2:] - 1).all()


def test_random_affine_box_only_exact_without_rotation() -> None:
    sample = _polygon_sample(np.array([[40, 30], [90, 30], [90, 80], [40, 80]], dtype=np.float32))
    sample.polygons = None
    out = _warp(sample, 3, degrees=0, shear=0)
    np.testing.assert_allclose(out.boxes[0], _white_box(out.image), atol=1.0)


def test_random_affine_mask_follows_warp() -> None:
    polygon = np.array([[40, 30], [90, 45], [70, 95], [35, 80]], dtype=np.float32)
    out = _warp(_polygon_sample(polygon), 7)
    targets = to_targets(out, "segment", max_instances=2)
    assert targets.masks is not None
    mask = targets.masks[0].astype(bool)
    white = cv2.resize(out.image[..., 0], (SIZE // 4, SIZE // 4), interpolation=cv2.INTER_AREA)
    reference = white > 127
    iou = (mask & reference).sum() / (mask | reference).sum()
    assert iou > 0.85
    assert not targets.masks[1].any()


def test_random_affine_keypoints_follow_warp() -> None:
    image = np.zeros((SIZE, SIZE, 3), dtype=np.uint8)
    image[58:70, 38:50] = 255
    sample = Sample(
        image=image,
        classes=np.zeros(1, dtype=np.int64),
        boxes=np.array([[30, 50, 90, 80]], dtype=np.float32),
        keypoints=np.array([[[44, 64, 2], [0, 0, 0]]], dtype=np.float32),
    )
    for seed in range(5):
        out = _warp(sample, seed)
        assert out.keypoints is not None
        x, y, v = out.keypoints[0, 0]
        assert v == 2
        assert out.image[int(y), int(x), 0] > 127
        assert out.keypoints[0, 1].tolist() == [0.0, 0.0, 0.0]


def test_random_affine_obb_follows_warp() -> None:
    corners = corner_array(np.array([[64, 64, 60, 20, 0.5]], dtype=np.float32))
    sample = _polygon_sample(corners[0])
    sample.polygons = None
    sample.corners = corners
    out = _warp(sample, 11, shear=0)
    targets = to_targets(out, "obb", max_instances=1)
    assert targets.rboxes is not None
    rect = corner_array(targets.rboxes)[0]
    drawn = _fill(rect) > 127
    white = out.image[..., 0] > 127
    iou = (white & drawn).sum() / (white | drawn).sum()
    assert iou > 0.9
    np.testing.assert_allclose(targets.boxes[0], _white_box(out.image), atol=1.5)


def test_warp_sample_counts_instances_pushed_out() -> None:
    sample = _polygon_sample(
        np.array([[10, 10], [110, 10], [110, 110], [10, 110]], dtype=np.float32)
    )
    shift = np.array([[1.0, 0.0, -102.0], [0.0, 1.0, 0.0]])  # 8 of 100 px stay visible
    out = warp_sample(sample, shift, (SIZE, SIZE), RULE)
    assert len(out) == 0
    assert out.drops.outside == 1
