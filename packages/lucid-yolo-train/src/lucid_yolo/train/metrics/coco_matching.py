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
takes a target that is not reusable, so every round but the last takes one: one more than the
most non-reusable targets an image has within reach (some overlap at the lowest threshold)
bounds the rounds. :func:`match_extent` computes that bound, the most predictions within reach
in one image and the last target column within reach, on the device. Predictions out of reach
can never match nor take a target from another, so each image's predictions within reach are
moved to the front (a stable sort keeps their order) and only those rows take part; columns
beyond the last within reach are left out. The caller reads the three numbers when it suits it
(the accumulator reads them one batch later, when they are long ready, so the host never waits
for the device's queue).
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


def threshold_constant(thresholds: FloatArray, device: torch.device) -> Tensor:
    """(T,) float64 ``thresholds``, each capped as COCO caps it, on ``device``: the same tensor
    on every call, for the life of the process
    (:func:`~lucid_yolo.train.metrics.device_constants.float64_constant`), so a graph may read
    it."""
    capped = np.minimum(np.asarray(thresholds, dtype=np.float64), _THRESHOLD_CAP)
    return float64_constant(tuple(capped.tolist()), device)


def match_extent(
    overlaps: Tensor, reusable: Tensor, thresholds: FloatArray = IOU_THRESHOLDS
) -> Tensor:
    """How much of a batch :func:`match_batch` has to visit, computed on the device.

    Args:
        overlaps: (B, D, G) float64, as for :func:`match_batch`.
        reusable: (B, G) bool.
        thresholds: (T,) overlap thresholds.

    Returns:
        (3,) int64: the rounds that settle every prediction, the most predictions of one image
        within reach (an overlap at or above the lowest threshold), and one past the last
        target column within reach.
    """
    B, D, G = overlaps.shape
    if B == 0 or D == 0 or G == 0:
        return torch.zeros(3, dtype=torch.int64, device=overlaps.device)
    lowest = float(min(np.min(thresholds), _THRESHOLD_CAP))
    reach = overlaps >= lowest  # (B, D, G)
    takeable = reach.any(dim=1) & ~reusable.to(device=overlaps.device, dtype=torch.bool)
    rounds = takeable.sum(dim=1).amax() + 1
    rows = reach.any(dim=2).sum(dim=1).amax()
    cols = (reach.any(dim=1).any(dim=0) * torch.arange(1, G + 1, device=overlaps.device)).amax()
    return torch.stack([rounds, rows, cols])


def match_batch(
    overlaps: Tensor,
    ignore: Tensor,
    reusable: Tensor,
    thresholds: FloatArray = IOU_THRESHOLDS,
    extent: Sequence[int] | None = None,
) -> tuple[Tensor, Tensor]:
    """Greedy COCO matching of a padded batch of images, on the overlaps' device.

    Args:
        overlaps: (B, D, G) float64, predictions of each image in matching order; -1 for pairs
            that must never match (different classes, padding rows or columns).
        ignore: (B, G) bool, targets that do not count.
        reusable: (B, G) bool, targets that can absorb several predictions.
        thresholds: (T,) overlap thresholds; each is capped at ``1 - 1e-10`` as in COCO.
        extent: ``(rounds, rows, columns)`` from :func:`match_extent` with the same inputs,
            already read to the host; when left out it is computed and read here, which waits
            for the device.

    Returns:
        ``matched`` and ``ignored``, each (B, T, D) bool (see :class:`ImageMatches`).
    """
    B, D, _ = overlaps.shape
    device = overlaps.device
    threshold = threshold_constant(thresholds, device)  # (T,)
    T = threshold.shape[0]
    matched = torch.zeros(B, T, D, dtype=torch.bool, device=device)
    ignored = torch.zeros_like(matched)
    if extent is None:
        extent = match_extent(overlaps, reusable, thresholds).tolist()
    rounds, R, G = (int(v) for v in extent)  # R: rows within reach
    if G == 0 or R == 0:
        return matched, ignored
    lowest = float(min(np.min(thresholds), _THRESHOLD_CAP))
    within_reach = (overlaps[..., :G] >= lowest).any(dim=2)  # (B, all rows)
    # each image's rows within reach first, in their order: (B, R) indices of the original rows
    rows = torch.argsort((~within_reach).to(torch.uint8), dim=1, stable=True)[:, :R]
    overlaps = overlaps[..., :G].gather(1, rows[..., None].expand(B, R, G))
    ignore, reusable = ignore[:, :G], reusable[:, :G]
    value = overlaps.to(torch.float64)[:, None]  # (B, 1, R, G)
    above = value >= threshold[None, :, None, None]  # (B, T, R, G)
    counted = ~ignore.to(device=device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, G)
    per_threshold = (B, T, G)
    target_ignored = (~counted[:, :, 0, :]).expand(per_threshold)  # (B, T, G)
    target_reusable = reusable.to(device=device, dtype=torch.bool)[:, None, :].expand(per_threshold)
    target_index = torch.arange(G, device=device)  # (G,)
    rank = torch.arange(R, device=device)  # (R,)
    taken = torch.zeros(B, T, 1, G, dtype=torch.bool, device=device)
    unsettled = torch.ones(B, T, R, dtype=torch.bool, device=device)
    reached_matched = torch.zeros(B, T, R, dtype=torch.bool, device=device)  # along ``rows``
    reached_ignored = torch.zeros_like(reached_matched)
    for _ in range(rounds):
        candidate = above & ~taken & unsettled[..., None]  # (B, T, R, G)
        favourite, has_favourite = _favourite(value, candidate, counted, target_index)
        favourite_reusable = target_reusable.gather(2, favourite)  # (B, T, R)
        favourite_ignored = target_ignored.gather(2, favourite)
        # step 1: a reusable favourite is final
        final = has_favourite & favourite_reusable
        reached_matched |= final
        reached_ignored |= final & favourite_ignored
        # step 2: settled as well, unmatched, when nothing is left to take
        unsettled &= has_favourite & ~favourite_reusable
        candidate &= unsettled[..., None]
        # step 3: the first unsettled prediction that can take a target takes it if it wants it
        first = torch.where(candidate, rank[:, None], R).amin(dim=2)  # (B, T, G)
        wins = unsettled & (first.gather(2, favourite) == rank)  # (B, T, R)
        reached_matched |= wins
        reached_ignored |= wins & favourite_ignored
        unsettled &= ~wins
        won = (favourite[..., None] == target_index) & wins[..., None]  # (B, T, R, G)
        taken |= won.any(dim=2, keepdim=True)
    back = rows[:, None, :].expand(B, T, R)  # each compacted row to its original rank
    return matched.scatter(2, back, reached_matched), ignored.scatter(2, back, reached_ignored)


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


__all__ = [
    "IOU_THRESHOLDS",
    "ImageMatches",
    "ImageOverlaps",
    "match_batch",
    "match_extent",
    "match_images",
]
