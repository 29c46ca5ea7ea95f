"""Sample -> padded per-image targets: padding, overflow, per-task fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rbox_corners import corner_array

from lucid_yolo.train.data.augment import Sample, largest_first, to_targets
from lucid_yolo.train.data.augment.targets import source_shapes
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.geometry import RunLengthMask


def _sample(n: int) -> Sample:
    sizes = np.arange(1, n + 1, dtype=np.float32) * 2
    boxes = np.stack([np.zeros(n), np.zeros(n), sizes, sizes], axis=1).astype(np.float32)
    return Sample(
        image=np.zeros((32, 32, 3), dtype=np.uint8),
        classes=np.arange(n, dtype=np.int64),
        boxes=boxes,
        polygons=[np.array([[0, 0], [s, 0], [s, s], [0, s]], dtype=np.float32) for s in sizes],
        keypoints=np.ones((n, 2, 3), dtype=np.float32),
        corners=corner_array(
            np.column_stack([sizes, sizes, sizes, sizes / 2, np.zeros(n)]).astype(np.float32)
        ),
    )


def test_to_targets_pads_with_invalid_rows() -> None:
    targets = to_targets(_sample(2), "detect", max_instances=4)
    assert targets.image.shape == (3, 32, 32)
    assert targets.classes.tolist() == [0, 1, -1, -1]
    assert targets.valid.tolist() == [True, True, False, False]
    assert not targets.boxes[2:].any()
    assert targets.masks is None
    assert targets.keypoints is None
    assert targets.rboxes is None
    assert targets.overflow == 0


def test_to_targets_overflow_keeps_largest_and_counts() -> None:
    targets = to_targets(_sample(5), "detect", max_instances=3)
    assert targets.overflow == 2
    assert targets.classes.tolist() == [2, 3, 4]


def test_to_targets_ignore_flags_follow_their_instances() -> None:
    sample = _sample(5)
    sample.ignore = np.array([False, True, False, True, False])
    targets = to_targets(sample, "obb", max_instances=6)
    assert targets.ignore.tolist() == [False, True, False, True, False, False]
    kept = to_targets(sample, "obb", max_instances=3)
    assert kept.classes.tolist() == [2, 3, 4]
    assert kept.ignore.tolist() == [False, True, False]


def test_to_targets_without_ignore_flags_ignores_nothing() -> None:
    targets = to_targets(_sample(2), "detect", max_instances=3)
    assert targets.ignore.tolist() == [False, False, False]


def test_largest_first_keeps_original_order_on_ties() -> None:
    boxes = np.array([[0, 0, 1, 1], [0, 0, 2, 2], [0, 0, 1, 1]], dtype=np.float32)
    assert largest_first(boxes, 2).tolist() == [0, 1]


def test_to_targets_segment_masks_quarter_resolution() -> None:
    targets = to_targets(_sample(3), "segment", max_instances=4)
    assert targets.masks is not None
    assert targets.masks.shape == (4, 8, 8)
    assert targets.masks.dtype == np.uint8
    # a 6 px square is 1.5 prototype pixels: only pixel (0, 0) has its centre inside (the centre
    # 1.5 lies on the far edge, which belongs to the next shape)
    assert targets.masks[2][0, 0] == 1
    assert targets.masks[2].sum() == 1
    assert not targets.masks[3].any()


def test_to_targets_pose_and_obb_fields() -> None:
    pose = to_targets(_sample(1), "pose", max_instances=2)
    assert pose.keypoints is not None
    assert pose.keypoints.shape == (2, 2, 3)
    obb = to_targets(_sample(1), "obb", max_instances=2)
    assert obb.rboxes is not None
    np.testing.assert_allclose(obb.rboxes[0], [2, 2, 2, 1, 0], atol=1e-5)


def test_to_targets_pose_without_instances_uses_num_keypoints() -> None:
    sample = _sample(0)
    sample.keypoints = None
    targets = to_targets(sample, "pose", max_instances=2, num_keypoints=17)
    assert targets.keypoints is not None
    assert targets.keypoints.shape == (2, 17, 3)


def test_source_shapes_stand_in_with_the_box_without_polygons() -> None:
    labels = ImageLabels(
        image_path=Path("a.png"),
        classes=np.zeros(1, dtype=np.int64),
        boxes=np.array([[0.25, 0.5, 0.75, 1.0]], dtype=np.float32),
    )
    (polygon,) = source_shapes(labels, (40, 80))
    assert polygon.tolist() == [[20.0, 20.0], [60.0, 20.0], [60.0, 40.0], [20.0, 40.0]]


def test_source_shapes_are_the_rle_where_one_was_read_else_the_polygon() -> None:
    rle = RunLengthMask.from_counts([10, 4, 26], 8, 5)
    square = np.array([[0.1, 0.1], [0.5, 0.1], [0.5, 0.5], [0.1, 0.5]], dtype=np.float32)
    labels = ImageLabels(
        image_path=Path("a.png"),
        classes=np.zeros(2, dtype=np.int64),
        boxes=np.array([[0.1, 0.1, 0.5, 0.5], [0.4, 0.25, 0.6, 0.75]], dtype=np.float32),
        polygons=[square, square],
        rle_masks=[None, rle],
    )
    polygon, kept = source_shapes(labels, (8, 5))
    assert kept is rle
    assert isinstance(polygon, np.ndarray)
    np.testing.assert_allclose(polygon, square.astype(np.float64) * [5, 8])


def test_to_targets_segment_mask_area_equals_the_polygon_area_at_prototype_resolution() -> None:
    # a 40 x 24 px rectangle from (6, 10) is 10 x 6 prototype pixels from (1.5, 2.5): the
    # centres of columns 1..10 and rows 2..7 lie inside (a centre on the near edge is in), 60
    # pixels, its exact area; OpenCV's fill also set every pixel an edge touches (11 x 7 = 77)
    sample = _sample(1)
    sample.image = np.zeros((64, 64, 3), dtype=np.uint8)
    sample.polygons = [np.array([[6, 10], [46, 10], [46, 34], [6, 34]], dtype=np.float32)]
    targets = to_targets(sample, "segment", max_instances=2)
    assert targets.masks is not None
    expected = np.zeros((16, 16), dtype=np.uint8)
    expected[2:8, 1:11] = 1
    np.testing.assert_array_equal(targets.masks[0], expected)


def test_to_targets_segment_mask_of_a_triangle_has_its_area() -> None:
    # right triangle with legs of 48 px = 12 prototype pixels: area 72 prototype pixels; the
    # centre rule sets 66 (the hypotenuse runs through 12 centres, which go to the far side),
    # OpenCV's fill set 91 (+26 %)
    sample = _sample(1)
    sample.image = np.zeros((64, 64, 3), dtype=np.uint8)
    sample.polygons = [np.array([[8, 8], [56, 8], [8, 56]], dtype=np.float32)]
    targets = to_targets(sample, "segment", max_instances=1)
    assert targets.masks is not None
    assert abs(int(targets.masks[0].sum()) - 72) <= 0.1 * 72
