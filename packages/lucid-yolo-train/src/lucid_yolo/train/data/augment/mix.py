"""Augmentations that combine instances: mixup (two images blended) and copy-paste (segment).

Mixup blends two augmented samples of the same size with a ratio ``~ Beta(32, 32)`` (about 0.5) and
keeps the instances of both, so the label count is exactly the sum.

Copy-paste (segment only) mirrors the sample left-right and pastes a random subset of the mirrored
instances back onto it, pixels through their own polygon masks, skipping any whose mirrored box
overlaps an existing instance by more than ``max_overlap`` of its area (the occluded parts of the
existing instances keep their polygons). Detect, pose and OBB have no pixel-accurate masks, so for
them copy-paste is a no-op: the sample is returned as is.
"""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np

from lucid_yolo.train.data.augment.flip import flip_lr
from lucid_yolo.train.data.augment.sample import Sample
from lucid_yolo.train.data.labels import FloatArray


def mixup(first: Sample, second: Sample, rng: np.random.Generator) -> Sample:
    """Blend two same-size samples and keep both instance sets.

    Args:
        first: the primary sample (its ids and ``scale_pad`` are kept).
        second: another sample with the same image size and task fields.
        rng: random source (draws the blend ratio).

    Returns:
        The blended sample with ``len(first) + len(second)`` instances.

    Raises:
        ValueError: the images differ in size.
    """
    if first.image.shape != second.image.shape:
        raise ValueError(
            f"mixup needs equal image shapes, got {first.image.shape!r} and "
            f"{second.image.shape!r}; letterbox or warp both to the network size first"
        )
    ratio = rng.beta(32.0, 32.0)
    blended = first.image.astype(np.float32) * ratio + second.image.astype(np.float32) * (1 - ratio)
    mixed = first.with_instances_of(second)
    drops = replace(first.drops)
    drops.add(second.drops)
    return replace(mixed, image=blended.astype(np.uint8), drops=drops)


def copy_paste(
    sample: Sample, probability: float, rng: np.random.Generator, max_overlap: float = 0.3
) -> Sample:
    """Paste mirrored copies of some segment instances onto the sample (module docstring).

    Args:
        sample: a segment sample (``polygons`` set); other tasks are returned unchanged.
        probability: chance that each instance is considered for pasting.
        rng: random source.
        max_overlap: largest allowed intersection of a pasted box with any existing box, as a
            fraction of the pasted box's area.

    Returns:
        The sample with the pasted instances appended.
    """
    if sample.polygons is None or probability <= 0 or len(sample) == 0:
        return sample
    mirrored = flip_lr(sample)
    chosen = np.flatnonzero(rng.random(len(sample)) < probability)
    if chosen.size == 0:
        return sample
    overlap = _intersection_over_first(mirrored.boxes[chosen], sample.boxes)  # (c, n)
    chosen = chosen[overlap.max(axis=1) < max_overlap]
    if chosen.size == 0:
        return sample
    pasted = mirrored.select(chosen)
    assert pasted.polygons is not None
    mask = np.zeros((sample.height, sample.width), dtype=np.uint8)
    cv2.fillPoly(mask, [np.round(p).astype(np.int32) for p in pasted.polygons], 1)
    image = np.where(mask[..., None].astype(bool), mirrored.image, sample.image)
    return replace(sample.with_instances_of(pasted), image=np.ascontiguousarray(image))


def _intersection_over_first(a: FloatArray, b: FloatArray) -> FloatArray:
    """(c, 4) and (n, 4) ``xyxy`` -> (c, n) intersection area / area of each ``a`` box."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(axis=1)
    ratio: FloatArray = inter / np.maximum(area[:, None], 1e-9)
    return ratio


__all__ = ["copy_paste", "mixup"]
