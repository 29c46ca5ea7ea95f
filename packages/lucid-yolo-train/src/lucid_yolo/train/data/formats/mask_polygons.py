"""A decoded mask's outer contours as polygons, the geometry the training pipeline transforms.

:class:`~lucid_yolo.train.data.labels.ImageLabels` trains segment instances from one polygon each
(the augmentations move polygons, and the targets are rasterised from them), so a COCO RLE
annotation also enters training as polygons; its RLE itself is kept for the mask metric
(:attr:`ImageLabels.rle_masks`).
"""

from __future__ import annotations

import cv2
import numpy as np

from lucid_yolo.train.data.labels import FloatArray
from lucid_yolo.train.geometry.run_length import UInt8Mask


def mask_to_polygons(mask: UInt8Mask, min_points: int = 3) -> list[FloatArray]:
    """Outer contours of a mask as polygons, largest area first.

    Holes are not represented: a ring-shaped mask becomes its filled outer outline.

    Args:
        mask: (H, W) uint8 of 0/1.
        min_points: contours with fewer vertices are dropped (single pixels, thin lines).

    Returns:
        Polygons, each (p, 2) float32 ``xy`` pixels through the centres of the boundary pixels
        (pixel ``i`` spans ``[i, i + 1)``, so its centre is ``i + 0.5``).
    """
    contours, _ = cv2.findContours(
        np.ascontiguousarray(mask, dtype=np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE
    )
    polygons = [
        c.reshape(-1, 2).astype(np.float32) + np.float32(0.5)
        for c in contours
        if len(c) >= min_points
    ]
    polygons.sort(key=lambda p: -abs(float(cv2.contourArea(p))))
    return polygons


__all__ = ["mask_to_polygons"]
