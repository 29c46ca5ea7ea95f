"""COCO's greedy matching rules, one rule per test, and batched == one image at a time."""

from __future__ import annotations

import numpy as np

from lucid_yolo.train.metrics import IOU_THRESHOLDS, ImageOverlaps, match_images

ONE = np.array([0.5])


def _image(overlaps: list[list[float]], ignore: list[bool], reusable: list[bool]) -> ImageOverlaps:
    return ImageOverlaps(np.array(overlaps, dtype=np.float64), np.array(ignore), np.array(reusable))


def test_match_images_higher_score_takes_the_target_first() -> None:
    image = _image([[0.6], [0.9]], [False], [False])  # rows in descending score
    (out,) = match_images([image], ONE)
    assert out.matched.tolist() == [[True, False]]


def test_match_images_takes_the_best_free_target() -> None:
    image = _image([[0.6, 0.8], [0.7, 0.9]], [False, False], [False, False])
    (out,) = match_images([image], ONE)
    assert out.matched.tolist() == [[True, True]]  # first takes target 1, second falls back to 0


def test_match_images_prefers_counted_over_ignored_targets() -> None:
    image = _image([[0.55, 0.95]], [False, True], [False, True])
    (out,) = match_images([image], ONE)
    assert out.matched.tolist() == [[True]]
    assert out.ignored.tolist() == [[False]]


def test_match_images_prediction_on_an_ignored_target_is_ignored() -> None:
    image = _image([[0.3, 0.95]], [False, True], [False, True])
    (out,) = match_images([image], ONE)
    assert out.ignored.tolist() == [[True]]


def test_match_images_reusable_targets_absorb_many_predictions() -> None:
    image = _image([[0.9], [0.8], [0.7]], [True], [True])
    (out,) = match_images([image], ONE)
    assert out.ignored.tolist() == [[True, True, True]]


def test_match_images_ignored_but_not_reusable_target_is_taken_once() -> None:
    image = _image([[0.9], [0.8]], [True], [False])  # e.g. a pose target without keypoints
    (out,) = match_images([image], ONE)
    assert out.matched.tolist() == [[True, False]]
    assert out.ignored.tolist() == [[True, False]]


def test_match_images_equal_overlaps_go_to_the_later_target() -> None:
    image = _image([[0.7, 0.7], [0.7, 0.0]], [False, False], [False, False])
    (out,) = match_images([image], ONE)
    assert out.matched.tolist() == [[True, True]]


def test_match_images_threshold_is_inclusive_per_threshold_row() -> None:
    image = _image([[0.75]], [False], [False])
    (out,) = match_images([image])
    assert out.matched[:, 0].tolist() == (IOU_THRESHOLDS <= 0.75).tolist()


def test_match_images_without_targets_matches_nothing() -> None:
    (out,) = match_images([ImageOverlaps(np.zeros((3, 0)), np.zeros(0, bool), np.zeros(0, bool))])
    assert out.matched.shape == (10, 3)
    assert not out.matched.any()


def test_match_images_batched_equals_one_at_a_time() -> None:
    rng = np.random.default_rng(0)
    images = []
    for d, g in [(5, 3), (0, 2), (7, 6), (2, 0)]:
        images.append(
            ImageOverlaps(
                np.where(rng.random((d, g)) < 0.2, -1.0, rng.random((d, g))),
                rng.random(g) < 0.3,
                rng.random(g) < 0.3,
            )
        )
    batched = match_images(images)
    for image, together in zip(images, batched, strict=True):
        (alone,) = match_images([image])
        assert np.array_equal(alone.matched, together.matched)
        assert np.array_equal(alone.ignored, together.ignored)
