"""Final conversion of a :class:`Sample` to one image's slice of the padded dense batch.

Per task the sample's pixel geometry becomes the fields of the Batch contract
(:mod:`lucid_yolo.train.data.batch`): instance masks are rasterised from the polygons at a quarter
of the input size (the prototype resolution) by the pixel-centre rule, rotated boxes are converted
from corners to ``xywhr`` (:mod:`.rbox`), and every array is padded to ``max_instances`` rows.
When an image has more instances than that, the largest boxes (by area) are kept in their original
order and the overflow is returned for the caller to count: never a silent loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from lucid_yolo.train.data.augment.geometry import box_corners
from lucid_yolo.train.data.augment.rbox import corners_to_xywhr
from lucid_yolo.train.data.augment.sample import DropCounts, Sample, UInt8Array
from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.labels import BoolArray, FloatArray, ImageLabels, IntArray
from lucid_yolo.train.geometry import SourceShape, polygon_mask

MASK_STRIDE: Final = 4
"""Instance masks are stored at ``input size / MASK_STRIDE`` (the prototype resolution)."""


@dataclass
class Targets:
    """One image's padded targets (numpy; the collate stacks them into a Batch).

    Shapes use ``N`` = ``max_instances``, ``S`` = input size, ``K`` = keypoints per instance.

    Attributes:
        image: (3, S, S) uint8 RGB, channels first.
        classes: (N,) int64, -1 in padding.
        valid: (N,) bool.
        ignore: (N,) bool, valid instances that metrics ignore (``False`` in padding).
        boxes: (N, 4) float32 ``xyxy`` pixels (OBB: hull of the rotated box).
        masks: segment: (N, S/4, S/4) uint8 0/1, else ``None``.
        keypoints: pose: (N, K, 3) float32 pixels + visibility, else ``None``.
        rboxes: obb: (N, 5) float32 ``xywhr`` long-edge, else ``None``.
        image_id: dataset index of the (primary) image.
        orig_size: (height, width) of the source image.
        scale_pad: (scale, pad_x, pad_y).
        overflow: instances beyond ``max_instances`` that were left out.
        drops: instances the augmentations removed.
        source_shapes: segment evaluation: each valid instance's ground truth in source pixels,
            its RLE or its (p, 2) float64 polygon (set by the dataset, which holds the labels),
            else ``None``.
        deferred_hsv: (3,) float64 HSV gains the device is still to apply, else ``None``.
        deferred_flip: whether the device is still to mirror ``image``; ``None`` when the
            sample's pixels were finished in the worker.
        deferred_masks: segment samples whose pixels are finished on the device: ``masks``
            bit-packed along their width (``np.packbits``, (N, S/4, S/32) uint8, 8x fewer bytes
            through collate, pinning and the copy), and ``masks`` is ``None``.
    """

    image: UInt8Array
    classes: IntArray
    valid: BoolArray
    ignore: BoolArray
    boxes: FloatArray
    masks: UInt8Array | None
    keypoints: FloatArray | None
    rboxes: FloatArray | None
    image_id: int
    orig_size: tuple[int, int]
    scale_pad: tuple[float, float, float]
    overflow: int
    drops: DropCounts
    source_shapes: list[SourceShape] | None = None
    deferred_hsv: npt.NDArray[np.float64] | None = None
    deferred_flip: bool | None = None
    deferred_masks: UInt8Array | None = None


def largest_first(boxes: FloatArray, limit: int) -> IntArray:
    """Indices of the ``limit`` largest boxes by area, in their original order.

    Args:
        boxes: (n, 4) ``xyxy``.
        limit: how many to keep.

    Returns:
        (min(n, limit),) int64 ascending indices; ties keep the earlier instance.
    """
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    order = np.argsort(-area, kind="stable")[:limit]
    return np.sort(order).astype(np.int64)


def to_targets(sample: Sample, task: Task, max_instances: int, num_keypoints: int = 0) -> Targets:
    """Pad a sample to ``max_instances`` in the Batch layout of ``task``.

    Args:
        sample: a square, network-size sample.
        task: which task fields to fill.
        max_instances: fixed row count ``N``.
        num_keypoints: ``K`` for pose (used when the sample has no instances to take it from).

    Returns:
        The image's targets; ``overflow`` = instances beyond ``N`` (the largest ``N`` are kept).
    """
    n = len(sample)
    overflow = max(0, n - max_instances)
    if overflow:
        sample = sample.select(largest_first(sample.boxes, max_instances))
        n = max_instances
    classes = np.full(max_instances, -1, dtype=np.int64)
    classes[:n] = sample.classes
    valid = np.zeros(max_instances, dtype=bool)
    valid[:n] = True
    ignore = np.zeros(max_instances, dtype=bool)
    ignore[:n] = sample.ignore_flags()
    boxes = np.zeros((max_instances, 4), dtype=np.float32)
    boxes[:n] = sample.boxes
    masks = keypoints = rboxes = None
    if task == "segment":
        masks = _rasterise(sample, max_instances)
    elif task == "pose":
        k = num_keypoints if sample.keypoints is None else sample.keypoints.shape[1]
        keypoints = np.zeros((max_instances, k, 3), dtype=np.float32)
        if sample.keypoints is not None:
            keypoints[:n] = sample.keypoints
    elif task == "obb":
        rboxes = np.zeros((max_instances, 5), dtype=np.float32)
        if sample.corners is not None:
            rboxes[:n] = corners_to_xywhr(sample.corners)
    deferred = sample.deferred
    packed = None
    if deferred is not None and masks is not None:
        packed = np.packbits(masks, axis=-1)
        masks = None
    return Targets(
        image=np.ascontiguousarray(sample.image.transpose(2, 0, 1)),
        classes=classes,
        valid=valid,
        ignore=ignore,
        boxes=boxes,
        masks=masks,
        keypoints=keypoints,
        rboxes=rboxes,
        image_id=sample.image_id,
        orig_size=sample.orig_size,
        scale_pad=sample.scale_pad,
        overflow=overflow,
        drops=sample.drops,
        deferred_hsv=None if deferred is None else deferred.hsv_gains,
        deferred_flip=None if deferred is None else deferred.flip,
        deferred_masks=packed,
    )


def source_shapes(labels: ImageLabels, orig_size: tuple[int, int]) -> list[SourceShape]:
    """Each instance's ground truth in source pixels, what the mask metric scores against.

    Taken from the labels rather than mapped back from the letterboxed sample, so the metric
    scores the annotation itself: its RLE where it was given as one (holes kept), else its
    polygon (float64, no round trip through the resize). An instance without a polygon stands in
    with its box, as :class:`~lucid_yolo.train.data.YoloDataset` does for training.

    Args:
        labels: the image's normalised annotations.
        orig_size: ``(height, width)`` of the source image.

    Returns:
        n shapes: a :class:`~lucid_yolo.train.geometry.RunLengthMask` or a (p_i, 2) float64
        ``xy`` polygon in source pixels.
    """
    height, width = orig_size
    size = np.array([width, height], dtype=np.float64)
    if labels.polygons is None:
        return [c.astype(np.float64) * size for c in box_corners(labels.boxes)]
    rle_masks = labels.rle_masks or [None] * len(labels.polygons)
    return [
        p.astype(np.float64) * size if rle is None else rle
        for p, rle in zip(labels.polygons, rle_masks, strict=True)
    ]


def _rasterise(sample: Sample, max_instances: int) -> UInt8Array:
    """(N, S/4, S/4) uint8 0/1 masks: each polygon at prototype resolution, a pixel set iff its
    centre is inside (:func:`~lucid_yolo.train.geometry.polygon_mask`, the rule the evaluator's
    ground truth uses). OpenCV's fill, used before issue 13, also sets every pixel an edge
    touches: it made the synthetic targets 13 % larger than their polygons at 640 px."""
    mh, mw = sample.height // MASK_STRIDE, sample.width // MASK_STRIDE
    masks = np.zeros((max_instances, mh, mw), dtype=np.uint8)
    for i, polygon in enumerate(sample.polygons or []):
        masks[i] = polygon_mask(polygon / MASK_STRIDE, mh, mw)
    return masks


__all__ = ["MASK_STRIDE", "Targets", "largest_first", "source_shapes", "to_targets"]
