"""One COCO annotation checked and turned into a normalised instance row.

Split from :mod:`.coco` so the file-level bookkeeping (images, policy, categories) and the
per-annotation geometry each stay one concept.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.formats.geometry import (
    LabelRows,
    merge_polygon_parts,
    out_of_range_index,
)
from lucid_yolo.train.data.formats.mask_polygons import mask_to_polygons
from lucid_yolo.train.data.labels import FloatArray
from lucid_yolo.train.geometry import RleError, RunLengthMask


class CocoAnnotationError(ValueError):
    """An annotation is malformed; the message quotes the value (the caller adds where)."""


def _numbers(raw: object, what: str) -> FloatArray:
    if not isinstance(raw, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in raw
    ):
        raise CocoAnnotationError(f"`{what}` must be a list of numbers, got {raw!r}")
    return np.asarray(raw, dtype=np.float64).astype(np.float32)


def _normalise(points: FloatArray, width: int, height: int, what: str) -> FloatArray:
    scaled: FloatArray = (points / np.array([width, height], dtype=np.float32)).astype(np.float32)
    index = out_of_range_index(scaled)
    if index is not None:
        pixel = float(points.reshape(-1)[index])
        raise CocoAnnotationError(
            f"{what} coordinate {pixel!r} px is not finite or outside the {width}x{height} "
            "image; fix the annotation or the image's width/height"
        )
    return np.clip(scaled, 0.0, 1.0)


def _segmentation(
    segmentation: object, width: int, height: int
) -> tuple[FloatArray, RunLengthMask | None]:
    """The instance's training polygon, and its RLE when the annotation is one (holes kept)."""
    rle = None
    if isinstance(segmentation, dict):
        size, counts = segmentation.get("size"), segmentation.get("counts")
        if size != [height, width]:
            raise CocoAnnotationError(
                f"RLE size {size!r} differs from the image's [{height}, {width}]; re-encode it"
            )
        if not isinstance(counts, str | list):
            raise CocoAnnotationError(f"RLE counts must be a string or a list, got {counts!r}")
        try:
            rle = RunLengthMask.from_counts(counts, height, width)
        except RleError as error:
            raise CocoAnnotationError(f"RLE is malformed: {error}") from None
        parts = mask_to_polygons(rle.decode())
        if not parts:
            raise CocoAnnotationError("RLE mask is empty; remove the annotation")
    elif isinstance(segmentation, list) and segmentation:
        parts = []
        for raw in segmentation:
            part = _numbers(raw, "segmentation")
            if part.size < 6 or part.size % 2:
                raise CocoAnnotationError(
                    f"polygon of {part.size} values is not x, y pairs of at least 3 points"
                )
            parts.append(part.reshape(-1, 2))
    else:
        raise CocoAnnotationError(
            f"segmentation {segmentation!r} is neither polygons nor an RLE; the segment task "
            "needs one per annotation"
        )
    return _normalise(merge_polygon_parts(parts), width, height, "segmentation"), rle


def _keypoints(raw: object, num_keypoints: int, width: int, height: int) -> FloatArray:
    values = _numbers(raw, "keypoints")
    if values.size != 3 * num_keypoints:
        raise CocoAnnotationError(
            f"{values.size} keypoint values, expected {3 * num_keypoints} (x, y, v for each of "
            f"the {num_keypoints} category keypoints)"
        )
    triplets = values.reshape(num_keypoints, 3)
    visibility = triplets[:, 2]
    if not np.isin(visibility, (0.0, 1.0, 2.0)).all():
        raise CocoAnnotationError(f"keypoint visibility {visibility.tolist()!r} must be 0, 1 or 2")
    out = np.zeros((num_keypoints, 3), dtype=np.float32)
    labelled = visibility > 0
    out[labelled, :2] = _normalise(triplets[labelled, :2], width, height, "keypoint")
    out[:, 2] = visibility
    return out


def parse_annotation(
    ann: Mapping[str, object],
    rows: LabelRows,
    *,
    task: Task,
    height: int,
    width: int,
    contiguous: Mapping[int, int],
    num_keypoints: int,
    difficult: bool,
) -> None:
    """Check one annotation and append its instance to ``rows``.

    Args:
        ann: the annotation dict.
        rows: the image's instances so far.
        task: ``detect``, ``segment`` or ``pose``; selects the fields read.
        height: the image's height, pixels.
        width: the image's width, pixels.
        contiguous: COCO category id → contiguous class id.
        num_keypoints: pose only: K.
        difficult: the instance is a crowd region kept for metrics to ignore.

    Raises:
        CocoAnnotationError: unknown category, malformed or out-of-image bbox, segmentation or
            keypoints.
    """
    category = ann.get("category_id")
    if not isinstance(category, int) or category not in contiguous:
        raise CocoAnnotationError(
            f"category_id {category!r} is not in `categories` {sorted(contiguous)!r}"
        )
    bbox = _numbers(ann.get("bbox"), "bbox")
    if bbox.size != 4 or not (bbox[2] > 0 and bbox[3] > 0):
        raise CocoAnnotationError(f"bbox {bbox.tolist()!r} is not [x, y, w, h] with w, h > 0")
    corners = np.array([bbox[:2], bbox[:2] + bbox[2:]], dtype=np.float32)
    box = _normalise(corners, width, height, "bbox").reshape(4)
    if task == "segment":
        polygon, rle = _segmentation(ann.get("segmentation"), width, height)
        rows.polygons.append(polygon)
        rows.rle_masks.append(rle)
    elif task == "pose":
        rows.keypoints.append(_keypoints(ann.get("keypoints"), num_keypoints, width, height))
    rows.classes.append(contiguous[category])
    rows.boxes.append(box)
    rows.difficult.append(difficult)


__all__ = ["CocoAnnotationError", "parse_annotation"]
