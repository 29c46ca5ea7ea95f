"""In-memory annotations of one image, shared by every dataset format and every task.

Parsers (Ultralytics txt, COCO json, DOTA txt, the synthetic generator) produce
:class:`ImageLabels`; the augmentation pipeline consumes it. Geometry is normalised to the source
image (x / width, y / height), so a label survives any resize of its image untouched. Fields that a
task does not use are ``None``; a field that is present has one row per instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from lucid_yolo.train.geometry.run_length import RunLengthMask

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ImageLabels:
    """Annotations of one image.

    Attributes:
        image_path: the image file.
        classes: (n,) int64 class ids in ``[0, num_classes)``.
        boxes: (n, 4) float32 ``xyxy`` normalised to the image; for OBB the hull of the corners.
        polygons: segment only: n polygons, each (p_i, 2) float32 normalised ``xy``, p_i >= 3;
            what training rasterises.
        rle_masks: segment only, ``None`` unless an instance was annotated as a COCO RLE: per
            instance its RLE in source pixels (holes kept), ``None`` for a polygon instance. The
            mask metric scores against the RLE; training uses the polygon (its contours, holes
            included, joined into one polygon that fills even-odd).
        keypoints: pose only: (n, K, 3) float32, normalised ``xy`` and visibility 0/1/2
            (0 = not labelled, then ``xy`` is 0).
        corners: obb only: (n, 4, 2) float32 normalised corner points in label order.
        difficult: (n,) bool, instances that metrics ignore: DOTA's difficult flag, COCO crowds
            read with ``crowd="ignore"``; all ``False`` for Ultralytics OBB rows; ``None`` when the
            format has no such notion.
        source: where the labels came from (file path, optionally ``path:line``), for messages.
    """

    image_path: Path
    classes: IntArray
    boxes: FloatArray
    polygons: list[FloatArray] | None = None
    rle_masks: list[RunLengthMask | None] | None = None
    keypoints: FloatArray | None = None
    corners: FloatArray | None = None
    difficult: BoolArray | None = None
    source: str = ""

    def __len__(self) -> int:
        return int(self.classes.shape[0])


__all__ = ["BoolArray", "FloatArray", "ImageLabels", "IntArray"]
