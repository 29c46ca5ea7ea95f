"""Move a whole :class:`Sample` through an affine map: image, boxes, polygons, keypoints, corners.

Two entry points share one geometry path so no task's labels can miss a transform:
:func:`transform_geometry` maps every geometry and keeps every instance (letterbox, mosaic
placement), :func:`warp_sample` also warps the image, clips to the output and applies the keep rule
of :mod:`~lucid_yolo.train.data.augment.geometry` (random affine).

Boxes after a warp come from the best geometry available: the clipped polygon (segment), the hull of
the rotated corners (OBB), else the hull of the warped box corners (detect, pose).
"""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np

from lucid_yolo.train.data.augment.geometry import (
    Float64Array,
    KeepRule,
    box_corners,
    clip_boxes,
    clip_polygon,
    keep_mask,
    points_to_box,
    warp_points,
)
from lucid_yolo.train.data.augment.sample import Sample, UInt8Array
from lucid_yolo.train.data.labels import FloatArray

PAD_VALUE = 114
"""Grey used for letterbox padding and warp borders (mid-grey, the YOLO convention)."""


def transform_geometry(sample: Sample, matrix: Float64Array, image: UInt8Array) -> Sample:
    """Map every geometry of ``sample`` with ``matrix`` onto ``image``; no clipping, no dropping.

    Args:
        sample: the sample whose labels to move.
        matrix: (2, 3) affine from ``sample.image`` pixels to ``image`` pixels.
        image: (H', W', 3) uint8 the already transformed image.

    Returns:
        The sample on ``image``: boxes are the hull of the warped box corners (exact for a
        scale + shift), other geometries warped point by point, labelled keypoints only.
    """
    keypoints = None
    if sample.keypoints is not None:
        keypoints = sample.keypoints.copy()
        labelled = keypoints[..., 2] > 0
        keypoints[..., :2] = np.where(
            labelled[..., None], warp_points(keypoints[..., :2], matrix), 0.0
        )
    return replace(
        sample,
        image=image,
        boxes=points_to_box(warp_points(box_corners(sample.boxes), matrix)),
        polygons=None
        if sample.polygons is None
        else [warp_points(p, matrix) for p in sample.polygons],
        keypoints=keypoints,
        corners=None if sample.corners is None else warp_points(sample.corners, matrix),
    )


def clip_sample(sample: Sample, rule: KeepRule) -> Sample:
    """Clip every geometry to the sample's image and drop instances by the keep rule.

    Args:
        sample: a sample whose geometry may reach past its image.
        rule: keep-rule thresholds; the "full" area is the box of the unclipped geometry.

    Returns:
        The clipped sample; dropped instances are added to ``sample.drops``. Keypoints outside the
        image become unlabelled (visibility 0, xy 0). OBB corners are kept whole (a rotated box may
        reach past the image), their hull box is clipped.
    """
    w, h = sample.width, sample.height
    polygons = sample.polygons
    if polygons is not None:
        full = _polygon_boxes(polygons)
        polygons = [clip_polygon(p, w, h) for p in polygons]
        visible = _polygon_boxes(polygons)
    else:
        full = points_to_box(sample.corners) if sample.corners is not None else sample.boxes
        visible = clip_boxes(full, w, h)
    keypoints = sample.keypoints
    if keypoints is not None:
        keypoints = keypoints.copy()
        xy = keypoints[..., :2]
        outside = (xy[..., 0] < 0) | (xy[..., 0] >= w) | (xy[..., 1] < 0) | (xy[..., 1] >= h)
        keypoints[outside] = 0.0
    clipped = replace(sample, boxes=visible, polygons=polygons, keypoints=keypoints)
    return clipped.select(keep_mask(visible, full, rule, clipped.drops))


def warp_sample(
    sample: Sample, matrix: Float64Array, out_size: tuple[int, int], rule: KeepRule
) -> Sample:
    """Warp image and labels with an affine map, then clip and apply the keep rule.

    Args:
        sample: input sample.
        matrix: (2, 3) affine from input pixels to output pixels.
        out_size: (height, width) of the output image.
        rule: keep-rule thresholds.

    Returns:
        The warped sample; borders are filled with :data:`PAD_VALUE`.
    """
    out_h, out_w = out_size
    image = np.asarray(
        cv2.warpAffine(
            sample.image,
            matrix.astype(np.float64),
            (out_w, out_h),
            flags=cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=(PAD_VALUE, PAD_VALUE, PAD_VALUE),
        ),
        dtype=np.uint8,
    )
    return clip_sample(transform_geometry(sample, matrix, image), rule)


def _polygon_boxes(polygons: list[FloatArray]) -> FloatArray:
    boxes = np.zeros((len(polygons), 4), dtype=np.float32)
    for i, p in enumerate(polygons):
        if p.shape[0]:
            boxes[i, :2] = p.min(axis=0)
            boxes[i, 2:] = p.max(axis=0)
    return boxes


__all__ = ["PAD_VALUE", "clip_sample", "transform_geometry", "warp_sample"]
