"""Geometry shared by the parsers: range checks, hulls, polygon merging, task-shaped labels.

All coordinates here are normalised to the image (x / width, y / height), as in
:class:`~lucid_yolo.train.data.labels.ImageLabels`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.labels import BoolArray, FloatArray, ImageLabels, IntArray
from lucid_yolo.train.geometry.run_length import RunLengthMask

COORD_TOLERANCE = 0.01
"""How far (normalised) a coordinate may lie outside ``[0, 1]`` before it is an error.

Annotation tools round and convert; a point 0.3 % outside the image is noise, 5 % outside is a
wrong image size or a pixel coordinate written unnormalised. Within the tolerance, boxes, polygons
and keypoints are clipped into ``[0, 1]``; OBB corners are kept as written (clipping would bend the
rectangle) and only their axis-aligned hull is clipped.
"""


def out_of_range_index(values: FloatArray) -> int | None:
    """Flat index of the first value that is non-finite or beyond ``[0, 1]`` by more than the
    tolerance, so a caller can quote the matching raw (e.g. pixel) value.

    Args:
        values: any shape, normalised coordinates.

    Returns:
        The index into ``values.reshape(-1)``, or ``None`` when all are acceptable.
    """
    flat = values.reshape(-1)
    bad = ~np.isfinite(flat) | (flat < -COORD_TOLERANCE) | (flat > 1 + COORD_TOLERANCE)
    return int(np.argmax(bad)) if bad.any() else None


def out_of_range(values: FloatArray) -> float | None:
    """The first value that :func:`out_of_range_index` finds, or ``None``."""
    index = out_of_range_index(values)
    return None if index is None else float(values.reshape(-1)[index])


def hull_box(points: FloatArray) -> FloatArray:
    """Axis-aligned hull of a point set, clipped to the image.

    Args:
        points: (p, 2) normalised ``xy``, p >= 1.

    Returns:
        (4,) float32 ``xyxy`` normalised, inside ``[0, 1]``.
    """
    box = np.concatenate([points.min(axis=0), points.max(axis=0)]).astype(np.float32)
    return np.clip(box, 0.0, 1.0)


def merge_polygon_parts(parts: list[FloatArray]) -> FloatArray:
    """Join the parts of a multi-part instance into one polygon with zero-width bridges.

    :class:`ImageLabels` holds one polygon per instance, but COCO instances (an occluded object,
    a decoded RLE mask) may have several disjoint parts. Each part after the first is entered from
    the point of the path so far that is nearest to it, walked around in full, and left the same
    way, so a scan-line fill of the result covers the union of the parts (the bridges have no area).

    Args:
        parts: polygons, each (p_i, 2) float32 normalised ``xy`` with p_i >= 3.

    Returns:
        (P, 2) float32, ``P = sum(p_i) + 2 * (len(parts) - 1)``; the part itself when there is one.
    """
    merged = parts[0]
    for part in parts[1:]:
        # Squared distances between every point of the path so far and every point of the part.
        distances = ((merged[:, None, :] - part[None, :, :]) ** 2).sum(axis=-1)  # (P, p)
        i, j = np.unravel_index(int(np.argmin(distances)), distances.shape)
        entered = np.concatenate([part[j:], part[: j + 1]])  # starts and ends at part[j]
        merged = np.concatenate([merged[: i + 1], entered, merged[i:]])
    return merged.astype(np.float32)


@dataclass
class LabelRows:
    """Instances of one image accumulated row by row, then frozen into :class:`ImageLabels`."""

    classes: list[int] = field(default_factory=list)
    boxes: list[FloatArray] = field(default_factory=list)
    polygons: list[FloatArray] = field(default_factory=list)
    rle_masks: list[RunLengthMask | None] = field(default_factory=list)
    keypoints: list[FloatArray] = field(default_factory=list)
    corners: list[FloatArray] = field(default_factory=list)
    difficult: list[bool] = field(default_factory=list)

    def build(self, image_path: Path, task: Task, num_keypoints: int, source: str) -> ImageLabels:
        """Stack the rows into the task's fields (empty arrays for a background image).

        Args:
            image_path: the image the rows label.
            task: selects which optional fields are filled (others stay ``None``).
            num_keypoints: K, pose only (shapes the empty (0, K, 3) array).
            source: where the rows came from, for messages.
        """
        n = len(self.classes)
        classes: IntArray = np.asarray(self.classes, dtype=np.int64).reshape(n)
        boxes: FloatArray = np.asarray(self.boxes, dtype=np.float32).reshape(n, 4)
        polygons = list(self.polygons) if task == "segment" else None
        rle_masks = None
        if task == "segment" and any(m is not None for m in self.rle_masks):
            assert len(self.rle_masks) == n, "a reader that keeps RLEs appends one per instance"
            rle_masks = list(self.rle_masks)
        keypoints: FloatArray | None = None
        if task == "pose":
            keypoints = np.asarray(self.keypoints, dtype=np.float32).reshape(n, num_keypoints, 3)
        corners: FloatArray | None = None
        difficult: BoolArray | None = None
        if task == "obb":
            corners = np.asarray(self.corners, dtype=np.float32).reshape(n, 4, 2)
            difficult = np.asarray(self.difficult, dtype=np.bool_).reshape(n)
        return ImageLabels(
            image_path=image_path,
            classes=classes,
            boxes=boxes,
            polygons=polygons,
            rle_masks=rle_masks,
            keypoints=keypoints,
            corners=corners,
            difficult=difficult,
            source=source,
        )


__all__ = [
    "COORD_TOLERANCE",
    "LabelRows",
    "hull_box",
    "merge_polygon_parts",
    "out_of_range",
    "out_of_range_index",
]
