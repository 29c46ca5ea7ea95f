"""COCO RLE: our encoder/decoder against faster-coco-eval's; the held form of an RLE label."""

from __future__ import annotations

import numpy as np
import pytest
from faster_coco_eval.core import mask as coco_mask
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from lucid_yolo.train.geometry import (
    RleError,
    RunLengthMask,
    counts_from_string,
    counts_to_string,
    rle_decode,
    rle_encode,
)


def _masks() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    masks = [(rng.random((h, w)) < p).astype(np.uint8) for h, w, p in [(7, 9, 0.5), (31, 17, 0.1)]]
    block = np.zeros((40, 50), np.uint8)
    block[5:30, 10:45] = 1
    full = np.ones((3, 4), np.uint8)
    return [*masks, block, full, np.zeros((5, 5), np.uint8)]


@pytest.mark.parametrize("index", range(5))
def test_rle_encode_matches_faster_coco_eval(index: int) -> None:
    mask = _masks()[index]
    reference = coco_mask.encode(np.asfortranarray(mask))
    assert rle_encode(mask) == {
        "size": list(mask.shape),
        "counts": reference["counts"].decode(),
    }


@pytest.mark.parametrize("index", range(5))
def test_rle_decode_inverts_faster_coco_eval(index: int) -> None:
    mask = _masks()[index]
    counts = coco_mask.encode(np.asfortranarray(mask))["counts"].decode()
    np.testing.assert_array_equal(rle_decode(counts, *mask.shape), mask)


def test_rle_decode_uncompressed_counts_are_column_major() -> None:
    mask = rle_decode([1, 2, 3], 2, 3)
    np.testing.assert_array_equal(mask, [[0, 1, 0], [1, 0, 0]])


def test_counts_string_round_trip_with_large_and_falling_runs() -> None:
    counts = [0, 5, 100000, 3, 7, 2, 99999, 1]
    assert counts_from_string(counts_to_string(counts)) == counts


def test_rle_decode_wrong_size_names_both_sizes() -> None:
    with pytest.raises(RleError, match=r"add up to 6 pixels, the size \[2, 4\] needs 8"):
        rle_decode([1, 2, 3], 2, 4)


def test_counts_from_string_rejects_bad_character() -> None:
    with pytest.raises(RleError, match=r"character '\\x7f' at 1"):
        counts_from_string("0\x7f")


def test_counts_from_string_rejects_truncated_count() -> None:
    with pytest.raises(RleError, match=r"ends inside a count"):
        counts_from_string("P")


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.uint8, array_shapes(min_dims=2, max_dims=2, max_side=12), elements=st.integers(0, 1))
)
def test_rle_encode_decode_round_trip_any_mask(mask: np.ndarray) -> None:
    rle = rle_encode(mask)
    np.testing.assert_array_equal(rle_decode(str(rle["counts"]), *mask.shape), mask)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), max_size=12))
def test_counts_string_round_trip_any_counts(counts: list[int]) -> None:
    assert counts_from_string(counts_to_string(counts)) == counts


def _ring(height: int = 12, width: int = 10) -> np.ndarray:
    mask = np.zeros((height, width), np.uint8)
    mask[2:10, 1:9] = 1
    mask[4:8, 3:6] = 0
    return mask


def test_run_length_mask_from_compressed_and_uncompressed_counts_agree() -> None:
    mask = _ring()
    text = coco_mask.encode(np.asfortranarray(mask))["counts"].decode()
    compressed = RunLengthMask.from_counts(text, *mask.shape)
    uncompressed = RunLengthMask.from_counts(counts_from_string(text), *mask.shape)
    np.testing.assert_array_equal(compressed.runs, uncompressed.runs)
    np.testing.assert_array_equal(compressed.decode(), mask)


def test_run_length_mask_keeps_the_hole() -> None:
    mask = _ring()
    decoded = RunLengthMask.from_counts(str(rle_encode(mask)["counts"]), *mask.shape).decode()
    assert decoded[4:8, 3:6].sum() == 0
    assert decoded.sum() == 8 * 8 - 4 * 3


def test_run_length_mask_area_is_coco_area() -> None:
    mask = _ring()
    reference = coco_mask.encode(np.asfortranarray(mask))
    rle = RunLengthMask.from_counts(reference["counts"].decode(), *mask.shape)
    assert rle.area == int(coco_mask.area(reference)) == 52


def test_run_length_mask_to_coco_is_the_compact_form_coco_writes() -> None:
    mask = _ring()
    reference = coco_mask.encode(np.asfortranarray(mask))
    rle = RunLengthMask.from_counts(counts_from_string(reference["counts"].decode()), 12, 10)
    assert rle.to_coco() == {"size": [12, 10], "counts": reference["counts"].decode()}


def test_run_length_mask_counts_of_another_size_are_refused() -> None:
    with pytest.raises(RleError, match=r"add up to 6 pixels, the size \[3, 3\] needs 9"):
        RunLengthMask.from_counts([2, 4], 3, 3)


def test_run_length_mask_refuses_counts_that_are_not_whole_numbers() -> None:
    with pytest.raises(RleError, match=r"RLE counts hold '4'; uncompressed counts are whole"):
        RunLengthMask.from_counts([2, "4", 3], 3, 3)  # type: ignore[list-item]
