"""COCO's greedy matching of predictions to targets, for a batch of images at once, on any device.

The rule (COCO detection evaluation, ``evaluateImg``), per image, class and IoU threshold ``t``:
predictions are visited by descending score (a stable sort, so ties keep their input order) and
each takes the still-free target with the highest overlap ``>= t``, preferring targets that are
not ignored; only when no such target qualifies may it take an ignored one. On equal overlaps the
later target wins, as in COCO's loop. A taken target is no longer free unless it is *reusable*
(a crowd region or a difficult instance), which may absorb any number of predictions. A
prediction matched to an ignored target is itself ignored: it is neither a true nor a false
positive. Different classes never compete, so callers put the overlap of cross-class pairs at -1
and match all classes of an image together.

Visiting the predictions one rank at a time costs one step per prediction (300 per image at a low
confidence cut). :func:`match_batch` reaches the same outcome in at most ``G + 1`` rounds, each
vectorised over images, thresholds, predictions and targets, with no host synchronisation, so it
runs where the overlaps are (issue 11). Each round, for every unsettled prediction, its
*favourite* is the target it would take now (best free candidate, counted ones first):

1. a prediction whose favourite is reusable takes it: a reusable target stays free, and the
   prediction's other candidates can only be taken away, so its choice can no longer change;
2. a prediction without any free candidate settles unmatched: free targets never come back;
3. a prediction takes its favourite if it ranks first among the unsettled predictions that have
   that target as a candidate: no prediction before it can take the target, and its other
   candidates can only be taken away, so the target is still its best when its turn comes.

After step 1 the first-ranked unsettled prediction with a candidate always wins in step 3 and
takes a target that is not reusable, so every round but the last takes one; ``G`` targets bound
the rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from lucid_yolo.train.metrics.device_constants import float64_constant

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

IOU_THRESHOLDS: FloatArray = np.linspace(0.5, 0.95, 10)
"""The ten COCO IoU thresholds 0.50:0.05:0.95 (``linspace``, not ``arange``: exact endpoints)."""

_THRESHOLD_CAP = 1 - 1e-10
"""COCO caps each threshold here, so that an overlap of exactly 1 always qualifies."""


@dataclass(frozen=True)
class ImageOverlaps:
    """Overlaps of one image, predictions already in matching order (host arrays).

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


def match_batch(
    overlaps: Tensor,
    ignore: Tensor,
    reusable: Tensor,
    thresholds: FloatArray = IOU_THRESHOLDS,
) -> tuple[Tensor, Tensor]:
    """Greedy COCO matching of a padded batch of images, on the overlaps' device.

    Args:
        overlaps: (B, D, G) float64, predictions of each image in matching order; -1 for pairs
            that must never match (different classes, padding rows or columns).
        ignore: (B, G) bool, targets that do not count.
        reusable: (B, G) bool, targets that can absorb several predictions.
        thresholds: (T,) overlap thresholds; each is capped at ``1 - 1e-10`` as in COCO.

    Returns:
        ``matched`` and ``ignored``, each (B, T, D) bool (see :class:`ImageMatches`).
    """
    B, D, G = overlaps.shape
    device = overlaps.device
    capped = np.minimum(np.asarray(thresholds, dtype=np.float64), _THRESHOLD_CAP)
    threshold = float64_constant(tuple(capped.tolist()), device)  # (T,)
    T = threshold.shape[0]
    matched = torch.zeros(B, T, D, dtype=torch.bool, device=device)
    ignored = torch.zeros_like(matched)
    if G == 0 or D == 0:
        return matched, ignored
    value = overlaps.to(torch.float64)[:, None]  # (B, 1, D, G)
    above = value >= threshold[None, :, None, None]  # (B, T, D, G)
    counted = ~ignore.to(device=device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, G)
    per_threshold = (B, T, G)
    target_ignored = (~counted[:, :, 0, :]).expand(per_threshold)  # (B, T, G)
    target_reusable = reusable.to(device=device, dtype=torch.bool)[:, None, :].expand(per_threshold)
    target_index = torch.arange(G, device=device)  # (G,)
    rank = torch.arange(D, device=device)  # (D,)
    taken = torch.zeros(B, T, 1, G, dtype=torch.bool, device=device)
    unsettled = torch.ones(B, T, D, dtype=torch.bool, device=device)
    for _ in range(G + 1):
        candidate = above & ~taken & unsettled[..., None]  # (B, T, D, G)
        favourite, has_favourite = _favourite(value, candidate, counted, target_index)
        favourite_reusable = target_reusable.gather(2, favourite)  # (B, T, D)
        favourite_ignored = target_ignored.gather(2, favourite)
        # step 1: a reusable favourite is final
        final = has_favourite & favourite_reusable
        matched |= final
        ignored |= final & favourite_ignored
        # step 2: settled as well, unmatched, when nothing is left to take
        unsettled &= has_favourite & ~favourite_reusable
        candidate &= unsettled[..., None]
        # step 3: the first unsettled prediction that can take a target takes it if it wants it
        first = torch.where(candidate, rank[:, None], D).amin(dim=2)  # (B, T, G)
        wins = unsettled & (first.gather(2, favourite) == rank)  # (B, T, D)
        matched |= wins
        ignored |= wins & favourite_ignored
        unsettled &= ~wins
        won = (favourite[..., None] == target_index) & wins[..., None]  # (B, T, D, G)
        taken |= won.any(dim=2, keepdim=True)
    return matched, ignored


def _favourite(
    value: Tensor, candidate: Tensor, counted: Tensor, target_index: Tensor
) -> tuple[Tensor, Tensor]:
    """Per prediction, the candidate it takes now: best counted one, else best ignored one.

    Args:
        value: (B, 1, D, G) float64 overlaps.
        candidate: (B, T, D, G) bool, free targets at or above the threshold.
        counted: (B, 1, 1, G) bool, targets that are not ignored.
        target_index: (G,) int64 ``arange``.

    Returns:
        ``favourite`` (B, T, D) int64 target index (0 where there is none, see ``has``) and
        ``has`` (B, T, D) bool. Among equal overlaps the last target wins.
    """
    has_counted = (candidate & counted).any(dim=3, keepdim=True)  # (B, T, D, 1)
    pool = candidate & (counted | ~has_counted)  # counted candidates if any, else all
    best = torch.where(pool, value, -torch.inf).amax(dim=3, keepdim=True)  # (B, T, D, 1)
    last = torch.where(pool & (value == best), target_index, -1).amax(dim=3)  # (B, T, D)
    has = last >= 0
    return last.clamp(min=0), has


def match_images(
    images: Sequence[ImageOverlaps], thresholds: FloatArray = IOU_THRESHOLDS
) -> list[ImageMatches]:
    """:func:`match_batch` for host arrays of images of any sizes (padded here, on the CPU).

    Args:
        images: per image, its overlaps in matching order and its target flags.
        thresholds: (T,) overlap thresholds; COCO caps each at ``1 - 1e-10``.

    Returns:
        One :class:`ImageMatches` per image, in input order.
    """
    if not images:
        return []
    B = len(images)
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
    matched, ignored = match_batch(
        torch.from_numpy(overlaps), torch.from_numpy(ignore), torch.from_numpy(reusable), thresholds
    )
    return [
        ImageMatches(
            matched[b, :, : im.overlaps.shape[0]].numpy(),
            ignored[b, :, : im.overlaps.shape[0]].numpy(),
        )
        for b, im in enumerate(images)
    ]


__all__ = ["IOU_THRESHOLDS", "ImageMatches", "ImageOverlaps", "match_batch", "match_images"]
