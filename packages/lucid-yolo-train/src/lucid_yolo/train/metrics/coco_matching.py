"""COCO's greedy matching of predictions to targets, for a batch of images at once.

The rule (COCO detection evaluation, ``evaluateImg``), per image, class and IoU threshold ``t``:
predictions are visited by descending score (a stable sort, so ties keep their input order) and
each takes the still-free target with the highest overlap ``>= t``, preferring targets that are
not ignored; only when no such target qualifies may it take an ignored one. On equal overlaps the
later target wins, as in COCO's loop. A taken target is no longer free unless it is *reusable*
(a crowd region or a difficult instance), which may absorb any number of predictions. A
prediction matched to an ignored target is itself ignored: it is neither a true nor a false
positive.

Images are padded to a common (predictions, targets) size and the greedy loop runs over the
prediction rank only, vectorised over images, thresholds and targets; the loop visits only the
ranks where some image has a prediction overlapping a target at the lowest threshold or more.
Different classes never compete, so callers put the overlap of cross-class pairs at -1 and match
all classes of an image together: the order of one class's predictions is unchanged by interleaving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

IOU_THRESHOLDS: FloatArray = np.linspace(0.5, 0.95, 10)
"""The ten COCO IoU thresholds 0.50:0.05:0.95 (``linspace``, not ``arange``: exact endpoints)."""


@dataclass(frozen=True)
class ImageOverlaps:
    """Overlaps of one image, predictions already in matching order.

    Attributes:
        overlaps: (D, G) float64 overlap of prediction ``d`` (descending score) with target
            ``g``; -1 for pairs that must never match (different classes).
        ignore: (G,) bool, targets that do not count (crowd, difficult, no visible keypoint).
        reusable: (G,) bool, targets that can absorb several predictions (crowd, difficult).
    """

    overlaps: FloatArray
    ignore: BoolArray
    reusable: BoolArray


@dataclass(frozen=True)
class ImageMatches:
    """Outcome of matching one image.

    Attributes:
        matched: (T, D) bool, prediction matched a target at threshold ``t``.
        ignored: (T, D) bool, prediction matched an ignored target at threshold ``t``.
    """

    matched: BoolArray
    ignored: BoolArray


def match_images(
    images: Sequence[ImageOverlaps], thresholds: FloatArray = IOU_THRESHOLDS
) -> list[ImageMatches]:
    """Greedy COCO matching of several images in one vectorised pass.

    Args:
        images: per image, its overlaps in matching order and its target flags.
        thresholds: (T,) overlap thresholds; COCO caps each at ``1 - 1e-10``.

    Returns:
        One :class:`ImageMatches` per image, in input order.
    """
    B, T = len(images), thresholds.shape[0]
    if B == 0:
        return []
    D = max(im.overlaps.shape[0] for im in images)
    G = max(im.overlaps.shape[1] for im in images)
    overlaps = np.full((B, D, G), -1.0)
    ignore = np.zeros((B, G), dtype=bool)
    reusable = np.zeros((B, G), dtype=bool)
    for b, im in enumerate(images):
        d, g = im.overlaps.shape
        overlaps[b, :d, :g] = im.overlaps
        ignore[b, :g] = im.ignore
        reusable[b, :g] = im.reusable
    matched = np.zeros((B, T, D), dtype=bool)
    ignored = np.zeros((B, T, D), dtype=bool)
    if G > 0:
        _greedy(overlaps, ignore, reusable, np.minimum(thresholds, 1 - 1e-10), matched, ignored)
    return [
        ImageMatches(matched[b, :, : im.overlaps.shape[0]], ignored[b, :, : im.overlaps.shape[0]])
        for b, im in enumerate(images)
    ]


def _greedy(
    overlaps: FloatArray,
    ignore: BoolArray,
    reusable: BoolArray,
    thresholds: FloatArray,
    matched: BoolArray,
    ignored: BoolArray,
) -> None:
    """Fill ``matched``/``ignored`` (B, T, D) from padded overlaps (B, D, G), rank by rank.

    Only ranks with an overlap at or above the lowest threshold are visited: any other
    prediction finds no candidate at any threshold, so it stays unmatched and takes nothing.
    With a low confidence cut most of an image's ``max_dets`` predictions are of that kind.
    """
    B, _, G = overlaps.shape
    T = thresholds.shape[0]
    taken = np.zeros((B, T, G), dtype=bool)
    b_idx, t_idx = np.meshgrid(np.arange(B), np.arange(T), indexing="ij")  # (B, T)
    threshold = thresholds[None, :, None]  # (1, T, 1)
    counted = ~ignore[:, None, :]  # (B, 1, G)
    reachable = (overlaps >= thresholds.min(initial=np.inf)).any(axis=(0, 2))  # (D,)
    for d in np.flatnonzero(reachable).tolist():
        overlap = overlaps[:, d, None, :]  # (B, 1, G)
        free = ~taken | reusable[:, None, :]
        candidate = free & (overlap >= threshold)  # (B, T, G)
        best_counted, has_counted = _last_argmax(overlap, candidate & counted)
        best_ignored, has_ignored = _last_argmax(overlap, candidate & ~counted)
        hit = has_counted | has_ignored  # (B, T)
        target = np.where(has_counted, best_counted, best_ignored)
        matched[:, :, d] = hit
        ignored[:, :, d] = hit & ~has_counted
        taken[b_idx[hit], t_idx[hit], target[hit]] = True


def _last_argmax(overlap: FloatArray, allowed: BoolArray) -> tuple[npt.NDArray[np.intp], BoolArray]:
    """Index of the largest allowed overlap along the last axis (the last one on ties)."""
    values = np.where(allowed, overlap, -np.inf)[..., ::-1]
    index: npt.NDArray[np.intp] = values.shape[-1] - 1 - np.argmax(values, axis=-1)
    has: BoolArray = np.any(allowed, axis=-1)
    return index, has


__all__ = ["IOU_THRESHOLDS", "ImageMatches", "ImageOverlaps", "match_images"]
