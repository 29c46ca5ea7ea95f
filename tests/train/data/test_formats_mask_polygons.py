"""A decoded mask's contours as the training polygon of an RLE annotation, holes included."""

from __future__ import annotations

import numpy as np

from lucid_yolo.train.data.formats import mask_to_polygons, merge_polygon_parts
from lucid_yolo.train.geometry import polygon_mask


def test_mask_to_polygons_largest_first_and_inside_the_parts() -> None:
    mask = np.zeros((40, 40), np.uint8)
    mask[2:6, 2:6] = 1
    mask[10:30, 10:35] = 1
    big, small = mask_to_polygons(mask)
    np.testing.assert_array_equal(big.min(axis=0), [10.5, 10.5])
    np.testing.assert_array_equal(big.max(axis=0), [34.5, 29.5])
    np.testing.assert_array_equal(small.max(axis=0), [5.5, 5.5])


def test_mask_to_polygons_merged_and_filled_even_odd_keep_a_hole_and_an_island_in_it() -> None:
    mask = np.zeros((30, 30), np.uint8)
    mask[2:28, 2:28] = 1
    mask[8:22, 8:22] = 0
    mask[12:18, 12:18] = 1
    polygon = merge_polygon_parts(mask_to_polygons(mask))
    filled = polygon_mask(polygon, 30, 30)
    # each contour runs through boundary pixel centres: a boundary moves by at most one pixel
    assert filled[3:7, 3:27].all(), "the frame"
    assert filled[3:27, 3:7].all(), "the frame"
    assert not filled[9:12, 9:21].any(), "the hole"
    assert not filled[9:21, 9:12].any(), "the hole"
    assert filled[13:17, 13:17].all(), "the island in the hole"
    inside = mask.astype(bool)
    assert not (filled & ~inside).any(), "an erosion: never outside the mask"
    assert (filled & inside).sum() / (filled | inside).sum() > 0.75
