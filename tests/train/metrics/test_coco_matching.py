"""COCO's greedy matching rules, one rule per test, and batched == one image at a time."""

from __future__ import annotations

import numpy as np
import torch
from host_reference import rank_by_rank
from hypothesis import given, settings
from hypothesis import strategies as st

from lucid_yolo.train.metrics import (
    IOU_THRESHOLDS,
    ImageOverlaps,
    match_batch,
    match_extent,
    match_images,
)

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


OVERLAP_VALUES = (-1.0, 0.0, 0.3, 0.49, 0.5, 0.55, 0.7, 0.95, 1.0)
"""Overlaps drawn from few values, so that ties and overlaps exactly at a threshold are common."""


def _matched_one_by_one(image: ImageOverlaps) -> tuple[np.ndarray, np.ndarray]:
    """The rule of the module docstring, written as COCO's loop: threshold, prediction, target."""
    D, G = image.overlaps.shape
    matched = np.zeros((IOU_THRESHOLDS.size, D), dtype=bool)
    ignored = np.zeros_like(matched)
    for t, threshold in enumerate(np.minimum(IOU_THRESHOLDS, 1 - 1e-10)):
        taken = np.zeros(G, dtype=bool)
        for d in range(D):
            best = -1
            for counted in (True, False):
                best_overlap = -np.inf
                for g in range(G):
                    free = not taken[g] or image.reusable[g]
                    overlap = image.overlaps[d, g]
                    wanted = image.ignore[g] != counted
                    if wanted and free and overlap >= threshold and overlap >= best_overlap:
                        best, best_overlap = g, overlap
                if best >= 0:
                    break
            if best >= 0:
                matched[t, d] = True
                ignored[t, d] = bool(image.ignore[best])
                taken[best] = True
    return matched, ignored


@st.composite
def _images(draw: st.DrawFn) -> list[ImageOverlaps]:
    images = []
    for _ in range(draw(st.integers(1, 3))):
        d, g = draw(st.integers(0, 9)), draw(st.integers(0, 5))
        cells = draw(st.lists(st.sampled_from(OVERLAP_VALUES), min_size=d * g, max_size=d * g))
        flags = draw(st.lists(st.booleans(), min_size=2 * g, max_size=2 * g))
        images.append(
            ImageOverlaps(
                np.array(cells, dtype=np.float64).reshape(d, g),
                np.array(flags[:g], dtype=bool),
                np.array(flags[g:], dtype=bool),
            )
        )
    return images


@settings(max_examples=200, deadline=None)
@given(_images())
def test_match_images_equals_cocos_loop(images: list[ImageOverlaps]) -> None:
    for image, out in zip(images, match_images(images), strict=True):
        matched, ignored = _matched_one_by_one(image)
        assert np.array_equal(out.matched, matched)
        assert np.array_equal(out.ignored, ignored)


def test_match_images_rounds_equal_the_rank_by_rank_loop_on_crowded_images() -> None:
    rng = np.random.default_rng(11)
    for _ in range(40):
        images = []
        for _ in range(4):
            d, g = int(rng.integers(0, 60)), int(rng.integers(0, 12))
            values = rng.choice(np.array(OVERLAP_VALUES), size=(d, g))
            images.append(ImageOverlaps(values, rng.random(g) < 0.3, rng.random(g) < 0.2))
        for image, out in zip(images, match_images(images), strict=True):
            matched, ignored = rank_by_rank(image)
            assert np.array_equal(out.matched, matched)
            assert np.array_equal(out.ignored, ignored)


def test_match_images_a_chain_of_displaced_predictions_needs_every_round() -> None:
    # prediction d overlaps targets d and d + 1, and prefers d + 1: each win displaces the next
    G = 6
    overlaps = np.full((G, G), -1.0)
    for d in range(G):
        overlaps[d, d] = 0.6
        if d + 1 < G:
            overlaps[d, d + 1] = 0.9
    image = ImageOverlaps(overlaps[::-1].copy(), np.zeros(G, bool), np.zeros(G, bool))
    (out,) = match_images([image])
    matched, _ = rank_by_rank(image)
    assert np.array_equal(out.matched, matched)
    assert out.matched[0].all()


def test_match_extent_counts_rounds_predictions_and_columns_within_reach() -> None:
    overlaps = torch.full((2, 5, 4), -1.0, dtype=torch.float64)
    overlaps[0, 1, 0] = overlaps[0, 1, 1] = 0.6  # two takeable targets in image 0
    overlaps[1, 3, 2] = 0.9  # a reusable one in image 1
    overlaps[1, 0, 1] = 0.5  # image 1's second prediction within reach
    overlaps[1, 4, 3] = 0.3  # below the lowest threshold: out of reach
    reusable = torch.tensor([[False] * 4, [False, False, True, False]])
    assert match_extent(overlaps, reusable).tolist() == [3, 2, 3]


def test_match_batch_beyond_the_extent_matches_nothing() -> None:
    overlaps = torch.full((1, 6, 5), -1.0, dtype=torch.float64)
    overlaps[0, 0, 0] = 0.8
    ignore = torch.zeros(1, 5, dtype=torch.bool)
    matched, ignored = match_batch(overlaps, ignore, ignore)
    assert matched.shape == (1, 10, 6)
    assert matched[0, :, 0].tolist() == (IOU_THRESHOLDS <= 0.8).tolist()
    assert not matched[0, :, 1:].any()
    assert not ignored.any()
