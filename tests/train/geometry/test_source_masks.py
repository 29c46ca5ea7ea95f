"""Ground truth at the source size: polygons rasterised, RLEs decoded as given."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lucid_yolo.train.geometry import RleError, RunLengthMask, rle_encode, source_masks


def _ring_rle() -> RunLengthMask:
    mask = np.zeros((6, 8), np.uint8)
    mask[1:5, 1:6] = 1
    mask[2:4, 2:4] = 0
    return RunLengthMask.from_counts(str(rle_encode(mask)["counts"]), 6, 8)


def test_source_masks_decode_an_rle_with_its_hole_next_to_a_polygon() -> None:
    square = np.array([[0.0, 0.0], [2.0, 0.0], [2.0, 2.0], [0.0, 2.0]])
    masks = source_masks([square, _ring_rle()], 6, 8)
    assert masks.dtype == torch.bool
    assert masks.shape == (2, 6, 8)
    assert masks[0].sum().item() == 4
    np.testing.assert_array_equal(masks[1].numpy(), _ring_rle().decode() == 1)
    assert not masks[1, 2:4, 2:4].any()
    assert masks[1].sum().item() == 4 * 5 - 2 * 2


def test_source_masks_of_no_instance() -> None:
    assert source_masks([], 4, 4).shape == (0, 4, 4)


def test_source_masks_refuse_an_rle_of_another_size() -> None:
    with pytest.raises(RleError, match=r"RLE of size \[6, 8\] labels an image of \[8, 6\]"):
        source_masks([_ring_rle()], 8, 6)
