"""A decoded mask's contours as polygons, the geometry the training pipeline transforms.

:class:`~lucid_yolo.train.data.labels.ImageLabels` trains segment instances from one polygon each
(the augmentations move polygons, and the targets are rasterised from them), so a COCO RLE
annotation also enters training as a polygon; its RLE itself is kept for the mask metric
(:attr:`ImageLabels.rle_masks`). Every contour is kept, holes' included: joined into one polygon
by zero-width bridges (:func:`~.geometry.merge_polygon_parts`) and filled by the even-odd rule, as
both the training targets (:func:`~lucid_yolo.train.geometry.polygon_mask`) and copy-paste
(``cv2.fillPoly``) fill, a hole's contour carves the hole back out of its outline.
"""

from __future__ import annotations

import cv2
import numpy as np

from lucid_yolo.train.data.labels import FloatArray
from lucid_yolo.train.geometry.run_length import UInt8Mask


def mask_to_polygons(mask: UInt8Mask, min_points: int = 3) -> list[FloatArray]:
    """Every contour of a mask (outlines and holes, at any nesting) as polygons, largest first.

    The contours run through the centres of the foreground pixels on the boundary, so the region
    they enclose under the even-odd rule is the mask eroded by half a pixel.

    Args:
        mask: (H, W) uint8 of 0/1.
        min_points: contours with fewer vertices are dropped (single pixels, thin lines).

    Returns:
        Polygons, each (p, 2) float32 ``xy`` pixels through the centres of the boundary pixels
        (pixel ``i`` spans ``[i, i + 1)``, so its centre is ``i + 0.5``).
    """
    contours, _ = cv2.findContours(
        np.ascontiguousarray(mask, dtype=np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE
    )
    polygons = [
        c.reshape(-1, 2).astype(np.float32) + np.float32(0.5)
        for c in contours
        if len(c) >= min_points
    ]
    polygons.sort(key=lambda p: -abs(float(cv2.contourArea(p))))
    return polygons


__all__ = ["mask_to_polygons"]
