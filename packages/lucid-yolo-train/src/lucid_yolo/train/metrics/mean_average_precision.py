"""COCO-style mAP accumulator for boxes, masks, keypoints (OKS) and rotated boxes.

Usage::

    metric = MeanAveragePrecision(kinds=("box", "mask"))
    for batch in loader:
        metric.update(predictions_per_image, targets_per_image)
    metric.compute()  # {"box/mAP50-95": ..., "box/mAP50": ..., "box/P": ..., "box/R": ...,
                      #  "mask/mAP50-95": ..., ...}

``update`` does the per-image work (sorting, the overlap matrix), matches the batch's images
together and keeps only a few numbers per prediction, all on the inputs' device and without
waiting for it, so masks are never stored and a GPU validation loop never stalls on the metric
(issue 11); ``compute`` reads the records to the host once and runs COCO's accumulation over
everything seen since the last ``reset``.

Definition followed (COCO evaluation, area range "all"):

* overlap: ``box`` IoU of ``xyxy`` boxes; ``mask`` IoU of binary masks; ``pose`` OKS
  (:mod:`~lucid_yolo.train.metrics.keypoint_similarity`); ``obb`` exact IoU of rotated rectangles
  (:mod:`~lucid_yolo.train.metrics.rotated_overlap`). Crowd targets are scored by intersection
  over the prediction's area (not for OKS, as in COCO).
* per image and class, only the ``max_dets`` highest-scoring predictions count (COCO: 100 for
  boxes and masks, 20 for keypoints; 100 here for rotated boxes);
* ignored targets: crowd (``iscrowd``), difficult (``difficult``, DOTA), and for ``pose`` targets
  without a visible keypoint (COCO's ``num_keypoints == 0``). Crowd and difficult targets absorb
  any number of predictions; a keypoint-less target only one;
* matching and accumulation: :mod:`~lucid_yolo.train.metrics.coco_matching` and
  :mod:`~lucid_yolo.train.metrics.precision_curves`.

Not modelled: COCO's small/medium/large area ranges (only "all" is reported, whose bound of
1e10 px² no real instance exceeds) and the recall (AR) statistics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, TypeVar

import torch
from torch import Tensor

from lucid_yolo.train.metrics.device_constants import float64_constant
from lucid_yolo.train.metrics.image_instances import (
    ImagePredictions,
    ImageTargets,
    MetricsInputError,
    require_fields,
    select_rows,
)
from lucid_yolo.train.metrics.keypoint_similarity import keypoint_sigmas, keypoint_similarity
from lucid_yolo.train.metrics.matched_records import KindRecords, PendingBatch
from lucid_yolo.train.metrics.overlaps import box_overlaps, mask_overlaps
from lucid_yolo.train.metrics.precision_curves import (
    best_f1_precision_recall,
    interpolated_precision,
    summarize_precision,
)
from lucid_yolo.train.metrics.rotated_overlap import rotated_overlaps

KINDS: Final = ("box", "mask", "pose", "obb")
_Record = TypeVar("_Record", ImagePredictions, ImageTargets)
DEFAULT_MAX_DETS: Final[Mapping[str, int]] = {"box": 100, "mask": 100, "pose": 20, "obb": 100}


@dataclass(frozen=True)
class _PreparedImage:
    """One image's part of an update for one kind, on the inputs' device, rows in matching order.

    Attributes:
        overlaps: (D, G) float64; -1 for pairs that never match (other class, padding, past
            ``max_dets``).
        ignore: (G,) bool, targets that do not count.
        reusable: (G,) bool, targets that absorb any number of predictions.
        scores: (D,) float64, descending.
        classes: (D,) int64.
        kept: (D,) bool, real predictions within the class's ``max_dets``.
        target_classes: (G,) int64.
        counted: (G,) bool, real targets that are not ignored.
    """

    overlaps: Tensor
    ignore: Tensor
    reusable: Tensor
    scores: Tensor
    classes: Tensor
    kept: Tensor
    target_classes: Tensor
    counted: Tensor


class MeanAveragePrecision:
    """Accumulates predictions and targets image by image; computes COCO mAP50-95, mAP50, P, R.

    Args:
        kinds: which overlaps to evaluate, any of ``"box"``, ``"mask"``, ``"pose"``, ``"obb"``;
            each reads its geometry field (boxes, masks, keypoints, rboxes) from both records.
        max_dets: per-kind override of the predictions kept per image and class
            (:data:`DEFAULT_MAX_DETS`).
        sigmas: OKS sigmas for ``pose``, one per keypoint; default
            :func:`~lucid_yolo.train.metrics.keypoint_similarity.keypoint_sigmas` of K.

    Raises:
        MetricsInputError: an unknown kind, a non-positive ``max_dets``, or an empty ``kinds``.

    Example:
        >>> metric = MeanAveragePrecision(kinds=("box",))
        >>> box = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
        >>> metric.update(
        ...     [ImagePredictions(torch.tensor([0.9]), torch.tensor([0]), boxes=box)],
        ...     [ImageTargets(torch.tensor([0]), boxes=box)],
        ... )
        >>> round(metric.compute()["box/mAP50-95"], 6)  # COCO's eps keeps it a hair below 1
        1.0
    """

    def __init__(
        self,
        kinds: Sequence[str] = ("box",),
        max_dets: Mapping[str, int] | None = None,
        sigmas: Sequence[float] | None = None,
    ) -> None:
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not kinds:
            raise MetricsInputError(
                f"kinds must be a non-empty subset of {KINDS!r}, got {tuple(kinds)!r}"
            )
        self.kinds = tuple(dict.fromkeys(kinds))
        self.max_dets = {**DEFAULT_MAX_DETS, **(max_dets or {})}
        bad = {k: v for k, v in self.max_dets.items() if v <= 0}
        if bad:
            raise MetricsInputError(f"max_dets must be positive, got {bad!r}")
        self.sigmas = None if sigmas is None else torch.tensor(list(sigmas), dtype=torch.float64)
        self._records = {kind: KindRecords() for kind in self.kinds}
        self._pending: dict[str, PendingBatch] = {}
        self._lowest_classes: list[Tensor] = []

    def reset(self) -> None:
        """Forget everything seen so far (call at the start of each validation epoch)."""
        self._records = {kind: KindRecords() for kind in self.kinds}
        self._pending = {}
        self._lowest_classes = []

    @torch.no_grad()
    def update(
        self,
        predictions: Iterable[ImagePredictions],
        targets: Iterable[ImageTargets],
        image_ids: Sequence[int] | Tensor | None = None,
    ) -> None:
        """Match one batch of images and keep the per-prediction outcome, on the inputs' device.

        The images are read one pair at a time and only their overlaps are kept, so a caller
        may pass generators that build each image's records (dense masks at source size) when
        asked: one image's masks are alive at a time. The batch is then matched together
        (:func:`~lucid_yolo.train.metrics.coco_matching.match_batch`) and its outcome stays on
        the device: nothing here waits for the device. Records on the CPU are checked for
        negative class ids here; on another device, by ``compute``.

        Args:
            predictions: per image, decoded predictions in source-image pixels.
            targets: per image, ground truth in the same pixels; same length and order.
            image_ids: per image, its index in the dataset (a sequence or a (B,) tensor, which
                may stay on the device). With ids, ``compute`` scores the images in id order
                and an id seen again counts once (a distributed sampler that pads its shards
                repeats images); without, images count in update order. Pass them on every
                update or on none.

        Raises:
            MetricsInputError: the sequences differ in length, or a record lacks a field the
                kinds read or has a field of the wrong shape.
        """
        prepared: dict[str, list[_PreparedImage]] = {kind: [] for kind in self.kinds}
        images = 0
        pairs = zip(predictions, targets, strict=True)
        while True:
            try:
                prediction, target = next(pairs)
            except StopIteration:
                break
            except ValueError as error:  # zip's strict check: one ran out before the other
                raise MetricsInputError(
                    f"prediction and target records differ in number (one ran out after "
                    f"{images!r} images): pass one of each per image, in the same order"
                ) from error
            images += 1
            prediction, target = _without_padding(prediction), _without_padding(target)
            for kind in self.kinds:
                prepared[kind].append(self._prepare(kind, prediction, target))
        if image_ids is not None and len(image_ids) != images:
            raise MetricsInputError(
                f"got {images!r} images and {len(image_ids)!r} image ids: pass one id per "
                "image, in the same order"
            )
        if images == 0:
            return
        ids = None if image_ids is None else torch.as_tensor(image_ids, dtype=torch.int64)
        self._settle()
        self._pending = {
            kind: PendingBatch.stack(
                overlaps=[image.overlaps for image in kind_images],
                ignore=[image.ignore for image in kind_images],
                reusable=[image.reusable for image in kind_images],
                scores=[image.scores for image in kind_images],
                classes=[image.classes for image in kind_images],
                kept=[image.kept for image in kind_images],
                target_classes=[image.target_classes for image in kind_images],
                counted=[image.counted for image in kind_images],
                image_ids=ids,
            )
            for kind, kind_images in prepared.items()
        }

    def _settle(self) -> None:
        """Match the batch left pending by the last ``update`` (its extent is on the host now)."""
        for kind, pending in self._pending.items():
            self._records[kind].batches.append(pending.finish())
        self._pending = {}

    def merge(self, other: MeanAveragePrecision) -> None:
        """Append everything ``other`` has seen, as if its images had been updated after ours.

        This is how per-process accumulators are combined
        (:func:`~lucid_yolo.train.metrics.gather_across_ranks`): the result equals one
        accumulator fed all images in the order self, other; with image ids, one accumulator
        fed every distinct image once, in id order.

        Raises:
            MetricsInputError: ``other`` evaluates other kinds or another ``max_dets``.
        """
        if other.kinds != self.kinds or other.max_dets != self.max_dets:
            raise MetricsInputError(
                f"cannot merge an accumulator of kinds {other.kinds!r} / max_dets "
                f"{other.max_dets!r} into one of {self.kinds!r} / {self.max_dets!r}: "
                "build both with the same arguments"
            )
        self._settle()
        other._settle()
        for kind in self.kinds:
            self._records[kind].batches += other._records[kind].batches
        self._lowest_classes += other._lowest_classes

    def cpu(self) -> MeanAveragePrecision:
        """A copy whose records are on the CPU, to send to other processes (pickled)."""
        self._settle()
        copy = MeanAveragePrecision(self.kinds, self.max_dets)
        copy.sigmas = self.sigmas
        for kind in self.kinds:
            copy._records[kind].batches = [b.cpu() for b in self._records[kind].batches]
        copy._lowest_classes = [lowest.cpu() for lowest in self._lowest_classes]
        return copy

    def compute(self) -> dict[str, float]:
        """COCO accumulation over everything seen since the last ``reset``.

        Returns:
            ``{"<kind>/mAP50-95", "<kind>/mAP50", "<kind>/P", "<kind>/R"}`` for every kind; the
            mAPs are 0.0 when no target was counted.
        """
        self._settle()
        self._check_deferred_class_ids()
        out: dict[str, float] = {}
        for kind in self.kinds:
            data = self._records[kind].gather()
            map50_95, map50 = summarize_precision(interpolated_precision(data))
            precision, recall = best_f1_precision_recall(data)
            out[f"{kind}/mAP50-95"] = map50_95
            out[f"{kind}/mAP50"] = map50
            out[f"{kind}/P"] = precision
            out[f"{kind}/R"] = recall
        return out

    def per_class(self, kind: str) -> dict[int, tuple[float, float]]:
        """Per-class ``(AP50-95, AP50)`` of ``kind``, for classes with at least one counted target.

        Raises:
            MetricsInputError: ``kind`` is not one this accumulator evaluates.
        """
        if kind not in self.kinds:
            raise MetricsInputError(f"kind {kind!r} is not evaluated here: one of {self.kinds!r}")
        self._settle()
        self._check_deferred_class_ids()
        precision = interpolated_precision(self._records[kind].gather())  # (T, R, C)
        return {
            c: (float(precision[:, :, c].mean()), float(precision[0, :, c].mean()))
            for c in range(precision.shape[2])
            if precision[0, 0, c] > -1
        }

    def _prepare(self, kind: str, pred: ImagePredictions, target: ImageTargets) -> _PreparedImage:
        """Order and cut one image's predictions and build its overlaps for ``kind``, no sync."""
        scores, pred_classes = require_fields(pred, ("scores", "classes"), kind)
        (target_classes,) = require_fields(target, ("classes",), kind)
        device = scores.device
        pred_valid = pred.valid_flags().to(device)
        target_valid = target.valid_flags().to(device)
        pred_classes = pred_classes.to(device=device, dtype=torch.int64)
        target_classes = target_classes.to(device=device, dtype=torch.int64)
        self._check_class_ids(pred_classes, pred_valid, target_classes, target_valid)
        score = scores.detach().to(torch.float64)
        order, kept = _matching_order(score, pred_classes, pred_valid, self.max_dets[kind])
        classes = pred_classes[order]
        same_class = classes[:, None] == target_classes[None, :]  # (D, G)
        possible = kept[:, None] & same_class & target_valid[None, :]
        pairs = torch.empty_like(possible)
        pairs[order] = possible  # the same pairs, in the records' row order
        overlaps = self._pair_overlaps(kind, pred, target, pairs)[order]
        ignore = self._target_ignore(kind, target).to(device)
        return _PreparedImage(
            overlaps=overlaps,
            ignore=ignore,
            reusable=target.ignore_flags().to(device),
            scores=score[order],
            classes=classes,
            kept=kept,
            target_classes=target_classes,
            counted=target_valid & ~ignore,
        )

    def _check_class_ids(
        self, pred_classes: Tensor, pred_valid: Tensor, target_classes: Tensor, target_valid: Tensor
    ) -> None:
        """Negative class ids of real rows: raised now on the CPU, by ``compute`` elsewhere."""
        lowest = torch.stack(
            [_lowest(pred_classes, pred_valid), _lowest(target_classes, target_valid)]
        )
        if lowest.device.type == "cpu":
            _raise_negative_class(lowest)
        else:
            self._lowest_classes.append(lowest)

    def _check_deferred_class_ids(self) -> None:
        if self._lowest_classes:
            lowest = torch.stack([v.cpu() for v in self._lowest_classes]).amin(dim=0)
            _raise_negative_class(lowest)

    def _pair_overlaps(
        self, kind: str, pred: ImagePredictions, target: ImageTargets, pairs: Tensor
    ) -> Tensor:
        """(n, m) float64 overlaps at ``pairs``, -1 elsewhere, rows in the records' order."""
        cut = _rows_and_columns_with_pairs(pairs)
        if cut is None:
            overlaps = self._overlaps(kind, pred, target, pairs)
            return torch.where(pairs, overlaps.to(pairs.device), -1.0)
        rows, cols = cut
        inner = pairs[rows][:, cols]
        overlaps = self._overlaps(kind, select_rows(pred, rows), select_rows(target, cols), inner)
        out = torch.full(pairs.shape, -1.0, dtype=torch.float64)
        out[rows[:, None], cols[None, :]] = torch.where(inner, overlaps.cpu(), -1.0)
        return out

    def _overlaps(
        self, kind: str, pred: ImagePredictions, target: ImageTargets, pairs: Tensor
    ) -> Tensor:
        """(n, m) float64 overlap of every prediction with every target, at least at ``pairs``.

        Only rotated boxes use ``pairs`` (n, m) bool, to clip on the CPU only the polygons that
        can match; other kinds compute every pair, which costs less than selecting them.
        """
        crowd = target.crowd_flags()
        if kind == "box":
            (p_boxes,) = require_fields(pred, ("boxes",), kind)
            (t_boxes,) = require_fields(target, ("boxes",), kind)
            return box_overlaps(p_boxes, t_boxes.to(p_boxes.device), crowd)
        if kind == "mask":
            (p_masks,) = require_fields(pred, ("masks",), kind)
            (t_masks,) = require_fields(target, ("masks",), kind)
            if p_masks.shape[1:] != t_masks.shape[1:]:
                raise MetricsInputError(
                    f"prediction masks are {tuple(p_masks.shape[1:])!r} but target masks are "
                    f"{tuple(t_masks.shape[1:])!r}: resize both to the source image (H, W)"
                )
            return mask_overlaps(p_masks, t_masks, crowd)
        if kind == "pose":
            (p_kpts,) = require_fields(pred, ("keypoints",), kind)
            t_kpts, t_boxes = require_fields(target, ("keypoints", "boxes"), kind)
            if p_kpts.ndim != 3 or t_kpts.ndim != 3 or p_kpts.shape[1] != t_kpts.shape[1]:
                raise MetricsInputError(
                    f"prediction keypoints are {tuple(p_kpts.shape)!r} and target keypoints "
                    f"{tuple(t_kpts.shape)!r}: expected (n, K, 3) and (m, K, 3) with the same K"
                )
            return keypoint_similarity(
                p_kpts,
                t_kpts,
                t_boxes,
                self._target_areas(target, t_boxes),
                self._sigmas(t_kpts),
            )
        (p_rboxes,) = require_fields(pred, ("rboxes",), kind)
        (t_rboxes,) = require_fields(target, ("rboxes",), kind)
        return rotated_overlaps(p_rboxes, t_rboxes, crowd, pairs=pairs.to(p_rboxes.device))

    def _sigmas(self, target_keypoints: Tensor) -> Tensor:
        K = target_keypoints.shape[1]
        sigmas = keypoint_sigmas(K) if self.sigmas is None else self.sigmas
        if sigmas.shape != (K,):
            raise MetricsInputError(
                f"got {sigmas.shape[0]!r} OKS sigmas for {K!r} keypoints: pass one per keypoint"
            )
        return float64_constant(tuple(sigmas.tolist()), target_keypoints.device)

    @staticmethod
    def _target_areas(target: ImageTargets, boxes: Tensor) -> Tensor:
        if target.areas is not None:
            (areas,) = require_fields(target, ("areas",), "pose")
            return areas
        return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])

    @staticmethod
    def _target_ignore(kind: str, target: ImageTargets) -> Tensor:
        ignore = target.ignore_flags()
        if kind == "pose":
            (keypoints,) = require_fields(target, ("keypoints",), kind)
            ignore = ignore | ~(keypoints[..., 2] > 0).any(dim=1).to(ignore.device)
        return ignore


def _matching_order(
    scores: Tensor, classes: Tensor, valid: Tensor, max_dets: int
) -> tuple[Tensor, Tensor]:
    """COCO's order of one image's predictions and which of them are scored.

    Args:
        scores: (n,) float64.
        classes: (n,) int64.
        valid: (n,) bool, real predictions.
        max_dets: predictions kept per class.

    Returns:
        ``order`` (n,) int64, real predictions by descending score (ties keep input order, a
        stable sort as in COCO) then the padding; ``kept`` (n,) bool along ``order``, the real
        predictions among their class's ``max_dets`` best.
    """
    order = torch.argsort(torch.where(valid, -scores, torch.inf), stable=True)
    ranked_classes = torch.where(valid, classes, torch.iinfo(torch.int64).max)[order]
    by_class = torch.argsort(ranked_classes, stable=True)  # groups classes, keeps score order
    grouped = ranked_classes[by_class]
    starts = torch.searchsorted(grouped, grouped, side="left")
    rank = torch.empty_like(by_class)
    rank[by_class] = torch.arange(by_class.shape[0], device=by_class.device) - starts
    return order, valid[order] & (rank < max_dets)


def _without_padding(record: _Record) -> _Record:
    """On the CPU, the record without its padding rows; elsewhere the record as it is.

    Static shapes keep the device's queue free of host reads (issue 11); on the CPU there is no
    queue, and every later step (overlaps, stacking, matching) is cheaper on the real rows
    only. The outcome is the same: padding rows take part in nothing.
    """
    valid = record.valid_flags()
    if valid.device.type != "cpu" or record.valid is None:
        return record
    real = torch.nonzero(valid).squeeze(1)
    if real.shape[0] == len(record):  # nothing to drop: no copy of the masks
        return replace(record, valid=None)
    return replace(select_rows(record, real), valid=None)


def _rows_and_columns_with_pairs(pairs: Tensor) -> tuple[Tensor, Tensor] | None:
    """On the CPU, the prediction rows and target columns that hold a pair; elsewhere ``None``.

    Overlaps are computed for these only: padding, predictions below the confidence cut or past
    ``max_dets`` and classes no target has are left out, which on the CPU costs nothing to find.
    Elsewhere every pair is computed, because finding them would make the host wait for the
    device (issue 11). A pair's overlap is the same either way.
    """
    if pairs.device.type != "cpu":
        return None
    return torch.nonzero(pairs.any(dim=1)).squeeze(1), torch.nonzero(pairs.any(dim=0)).squeeze(1)


def _lowest(classes: Tensor, valid: Tensor) -> Tensor:
    """() int64: the lowest class id among real rows, 0 when there is none."""
    return torch.where(valid, classes, 0).amin() if classes.numel() else classes.new_zeros(())


def _raise_negative_class(lowest: Tensor) -> None:
    """Raise on a negative id in (2,) [lowest prediction class, lowest target class]."""
    for name, value in zip(("predictions", "targets"), lowest.tolist(), strict=True):
        if value < 0:
            raise MetricsInputError(
                f"{name} hold class id {value!r}: class ids must be >= 0 "
                "(drop padded rows before the metric, or flag them in valid)"
            )


__all__ = ["DEFAULT_MAX_DETS", "KINDS", "MeanAveragePrecision"]
