"""What the accumulator keeps per batch, on the device, and how ``compute`` reads it back once.

Validation should not wait for the GPU on every image (issue 11), so a batch's outcome stays where
it was computed: per image, its predictions in matching order (score, class, whether it counts)
and their matches, its targets' classes and whether each counts, and its dataset index. Padding
is kept as padding (``kept`` / ``counted`` false) rather than cut away, because cutting needs the
sizes on the host. ``gather`` is the one host read: it pads every batch to a common size, copies
each field to the host in one piece, puts the images in dataset order and drops the padding,
giving the flat arrays that COCO's accumulation reads
(:class:`~lucid_yolo.train.metrics.precision_curves.MatchedPredictions`).

A batch is matched one batch late (:class:`PendingBatch`): how many rounds its matching needs
(:func:`~lucid_yolo.train.metrics.coco_matching.match_extent`) is known only on the device, so
it is copied to pinned host memory behind the batch's work and read at the next update, when the
copy has long finished; the host waits for that copy alone, never for the device's queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_yolo.train.host_copy import HostCopy
from lucid_yolo.train.metrics.coco_matching import IOU_THRESHOLDS, match_batch
from lucid_yolo.train.metrics.image_instances import MetricsInputError
from lucid_yolo.train.metrics.precision_curves import MatchedPredictions
from lucid_yolo.train.metrics.scored_batch import ScoredKind


class Matcher(Protocol):
    """Matches a batch as :func:`match_batch` does, its extent read to the host already."""

    def __call__(
        self, overlaps: Tensor, ignore: Tensor, reusable: Tensor, *, extent: Sequence[int]
    ) -> tuple[Tensor, Tensor]: ...


@dataclass(frozen=True)
class BatchRecords:
    """One batch's outcome for one kind; B images, D prediction rows, G target rows each.

    Attributes:
        scores: (B, D) float64, predictions in matching order (descending score).
        classes: (B, D) int64.
        kept: (B, D) bool, rows that are scored: real predictions within ``max_dets`` per class.
        matched: (B, T, D) bool, matched a target at threshold ``t``.
        ignored: (B, T, D) bool, matched an ignored target at threshold ``t``.
        target_classes: (B, G) int64.
        counted: (B, G) bool, real targets that are not ignored.
        image_ids: (B,) int64 dataset index of each image, or ``None`` when not given.
    """

    scores: Tensor
    classes: Tensor
    kept: Tensor
    matched: Tensor
    ignored: Tensor
    target_classes: Tensor
    counted: Tensor
    image_ids: Tensor | None

    def cpu(self) -> BatchRecords:
        """The same records on the CPU (for pickling across processes)."""
        return BatchRecords(
            scores=self.scores.cpu(),
            classes=self.classes.cpu(),
            kept=self.kept.cpu(),
            matched=self.matched.cpu(),
            ignored=self.ignored.cpu(),
            target_classes=self.target_classes.cpu(),
            counted=self.counted.cpu(),
            image_ids=None if self.image_ids is None else self.image_ids.cpu(),
        )


@dataclass(frozen=True)
class PendingBatch:
    """One batch of one kind, stacked and padded, waiting for its match extent on the host.

    Attributes:
        overlaps: (B, D, G) float64, -1 for pairs that never match.
        ignore: (B, G) bool.
        reusable: (B, G) bool.
        records: what :class:`BatchRecords` keeps besides the matches (``matched`` and
            ``ignored`` are empty until :meth:`finish`).
        extent: the batch's :func:`~lucid_yolo.train.metrics.coco_matching.match_extent`, on
            its way to the host.
    """

    overlaps: Tensor
    ignore: Tensor
    reusable: Tensor
    records: BatchRecords
    extent: HostCopy

    @classmethod
    def start(cls, scored: ScoredKind, image_ids: Tensor | None) -> PendingBatch:
        """Keep a scored batch and start its extent's copy to the host.

        Args:
            scored: the batch's kind, scored (:meth:`MeanAveragePrecision.score_batch`).
            image_ids: (B,) int64, on any device, or ``None``.
        """
        device = scored.overlaps.device
        records = BatchRecords(
            scores=scored.scores,
            classes=scored.classes,
            kept=scored.kept,
            matched=torch.zeros(0, dtype=torch.bool, device=device),
            ignored=torch.zeros(0, dtype=torch.bool, device=device),
            target_classes=scored.target_classes,
            counted=scored.counted,
            image_ids=None if image_ids is None else image_ids.to(device, non_blocking=True),
        )
        return cls(
            scored.overlaps, scored.ignore, scored.reusable, records, HostCopy(scored.extent)
        )

    def finish(self, match: Matcher = match_batch) -> BatchRecords:
        """Match the batch (after its extent has reached the host) and return its records.

        Args:
            match: how to match (:func:`match_batch` with the extent given, or its replay).
        """
        matched, ignored = match(
            self.overlaps, self.ignore, self.reusable, extent=self.extent.read().tolist()
        )
        return replace(self.records, matched=matched, ignored=ignored)


class KindRecords:
    """Every batch one kind has seen since the last reset."""

    def __init__(self) -> None:
        self.batches: list[BatchRecords] = []

    def __len__(self) -> int:
        """Images seen (repeats included)."""
        return sum(batch.scores.shape[0] for batch in self.batches)

    def gather(self) -> MatchedPredictions:
        """Read every batch to the host, in dataset order, padding dropped.

        Raises:
            MetricsInputError: some images were given an id and others not.
        """
        T = IOU_THRESHOLDS.shape[0]
        batches = self.batches
        if not batches:
            return MatchedPredictions(
                scores=np.zeros(0),
                classes=np.zeros(0, dtype=np.int64),
                matched=np.zeros((T, 0), dtype=bool),
                ignored=np.zeros((T, 0), dtype=bool),
                target_counts=np.zeros(0, dtype=np.int64),
            )
        D = max(b.scores.shape[-1] for b in batches)
        G = max(b.target_classes.shape[-1] for b in batches)
        order = self._image_order()
        kept = _host([b.kept for b in batches], D, False)[order]  # (n, D)
        scores = _host([b.scores for b in batches], D, 0.0)[order][kept]
        classes = _host([b.classes for b in batches], D, 0)[order][kept]
        matched = _host([b.matched for b in batches], D, False)[order].transpose(1, 0, 2)
        ignored = _host([b.ignored for b in batches], D, False)[order].transpose(1, 0, 2)
        target_classes = _host([b.target_classes for b in batches], G, 0)[order]
        counted = _host([b.counted for b in batches], G, False)[order]
        target_counts = np.bincount(target_classes[counted])
        num_classes = max(target_counts.shape[0], int(classes.max(initial=-1)) + 1)
        return MatchedPredictions(
            scores=scores,
            classes=classes,
            matched=matched[:, kept],  # (T, n, D)[:, (n, D)] → (T, N), image by image
            ignored=ignored[:, kept],
            target_counts=np.pad(target_counts, (0, num_classes - target_counts.shape[0])),
        )

    def _image_order(self) -> npt.NDArray[np.int64]:
        """Indices of the images to score: in update order, or by id with repeats dropped."""
        with_ids = [b.image_ids for b in self.batches if b.image_ids is not None]
        images = len(self)
        if not with_ids:
            return np.arange(images)
        given = sum(ids.shape[0] for ids in with_ids)
        if given != images:
            raise MetricsInputError(
                f"{images - given!r} of {images!r} images were updated without an image id: "
                "pass image_ids on every update or on none"
            )
        ids = np.concatenate([ids.cpu().numpy() for ids in with_ids]).astype(np.int64)
        _, first = np.unique(ids, return_index=True)
        return first.astype(np.int64)


def _host(parts: list[Tensor], size: int, fill: float) -> npt.NDArray[Any]:
    """Per-batch tensors padded to ``size`` in their last dimension, concatenated, on the host.

    Padding and concatenation happen on the tensors' device when they share one, so the copy to
    the host is one transfer per field.
    """
    padded = [F.pad(p, (0, size - p.shape[-1]), value=fill) for p in parts]
    if len({p.device for p in padded}) > 1:
        padded = [p.cpu() for p in padded]
    return torch.cat(padded).cpu().numpy()


__all__ = ["BatchRecords", "KindRecords", "Matcher", "PendingBatch"]
