"""A decoded mask's outer contours as the training polygons of an RLE annotation."""

from __future__ import annotations

import numpy as np

from lucid_yolo.train.data.formats import mask_to_polygons


def test_mask_to_polygons_largest_first_and_inside_the_parts() -> None:
    mask = np.zeros((40, 40), np.uint8)
    mask[2:6, 2:6] = 1
    mask[10:30, 10:35] = 1
    big, small = mask_to_polygons(mask)
    np.testing.assert_array_equal(big.min(axis=0), [10.5, 10.5])
    np.testing.assert_array_equal(big.max(axis=0), [34.5, 29.5])
    np.testing.assert_array_equal(small.max(axis=0), [5.5, 5.5])
