"""Horizontal flip: mirror the image and every geometry, swap left/right keypoints.

``x -> W - x`` for every point (pixel edges, so a box ``[x1, x2]`` becomes ``[W - x2, W - x1]``).
Keypoints are then permuted by ``flip_idx`` (the dataset YAML's left/right pairing: keypoint ``k``
of the flipped instance is keypoint ``flip_idx[k]`` of the mirrored one). Rotated-box corners are
mirrored point by point, so the ``xywhr`` derived from them gets ``r -> -r`` (mod pi) for free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from lucid_yolo.train.data.augment.sample import Sample
from lucid_yolo.train.data.errors import DatasetConfigError


def flip_lr(
    sample: Sample, flip_idx: Sequence[int] | None = None, *, pixels: bool = True
) -> Sample:
    """Mirror a sample left-right.

    Args:
        sample: the sample.
        flip_idx: keypoint permutation (length K) for pose; ``None`` keeps keypoint order (only
            valid for symmetric-free keypoint sets).
        pixels: mirror the image too; ``False`` mirrors the labels only, for a flip whose
            pixels the training device mirrors (:class:`.DeferredPixels`).

    Returns:
        The mirrored sample; unlabelled keypoints stay ``(0, 0, 0)``.

    Raises:
        DatasetConfigError: ``flip_idx`` is not a permutation of the K keypoints.
    """
    w = float(sample.width)
    boxes = sample.boxes.copy()
    boxes[:, 0], boxes[:, 2] = w - sample.boxes[:, 2], w - sample.boxes[:, 0]
    keypoints = None
    if sample.keypoints is not None:
        keypoints = sample.keypoints.copy()
        labelled = keypoints[..., 2] > 0
        keypoints[..., 0] = np.where(labelled, w - keypoints[..., 0], 0.0)
        if flip_idx is not None:
            order = np.asarray(flip_idx, dtype=np.int64)
            k = keypoints.shape[1]
            if sorted(order.tolist()) != list(range(k)):
                raise DatasetConfigError(
                    f"flip_idx {list(flip_idx)!r} is not a permutation of {k} keypoints; "
                    "set flip_idx in the dataset YAML to the index of each keypoint's mirror"
                )
            keypoints = keypoints[:, order]
    return replace(
        sample,
        image=np.ascontiguousarray(sample.image[:, ::-1]) if pixels else sample.image,
        boxes=boxes,
        polygons=None if sample.polygons is None else [_mirror(p, w) for p in sample.polygons],
        keypoints=keypoints,
        corners=None if sample.corners is None else _mirror(sample.corners, w),
    )


def _mirror(points: np.ndarray, width: float) -> np.ndarray:
    out = points.copy()
    out[..., 0] = width - points[..., 0]
    return out


__all__ = ["flip_lr"]
