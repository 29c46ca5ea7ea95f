"""COCO-style mAP accumulator for boxes, masks, keypoints (OKS) and rotated boxes.

Usage::

    metric = MeanAveragePrecision(kinds=("box", "mask"))
    for batch in loader:
        metric.update(predictions_per_image, targets_per_image)
    metric.compute()  # {"box/mAP50-95": ..., "box/mAP50": ..., "box/P": ..., "box/R": ...,
                      #  "mask/mAP50-95": ..., ...}

``update_batch`` takes a padded batch of images
(:mod:`~lucid_yolo.train.metrics.batch_instances`) and does everything (sorting, the overlap
matrices, the matching) for the whole batch at once, one operation per step rather than one per
image: a GPU validation loop spends its host time launching kernels, and per-image loops
launched most of them (issue 11, session 6). Only masks get their overlaps image by image (a
mask's size is its image's). ``update`` takes per-image records and pads them into a batch.
Everything stays on the inputs' device without waiting for it, so masks are never stored and a
GPU validation loop never stalls on the metric; ``compute`` reads the records to the host once
and runs COCO's accumulation over everything seen since the last ``reset``.

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

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Final, TypeVar

import torch
from torch import Tensor

from lucid_yolo.replay import Telemetry, merge_telemetry
from lucid_yolo.train.metrics import host_shortcuts
from lucid_yolo.train.metrics.batch_instances import BatchPredictions, BatchTargets
from lucid_yolo.train.metrics.coco_matching import match_batch, match_extent
from lucid_yolo.train.metrics.device_constants import float64_constant
from lucid_yolo.train.metrics.image_instances import (
    ImagePredictions,
    ImageTargets,
    MetricsInputError,
    require_fields,
)
from lucid_yolo.train.metrics.keypoint_similarity import keypoint_sigmas, keypoint_similarity
from lucid_yolo.train.metrics.match_replay import MatchReplay
from lucid_yolo.train.metrics.matched_records import KindRecords, Matcher, PendingBatch
from lucid_yolo.train.metrics.overlaps import box_overlaps, mask_overlaps
from lucid_yolo.train.metrics.precision_curves import (
    best_f1_precision_recall,
    interpolated_precision,
    summarize_precision,
)
from lucid_yolo.train.metrics.rotated_overlap import rotated_overlaps
from lucid_yolo.train.metrics.scored_batch import ScoredBatch, ScoredKind

KINDS: Final = ("box", "mask", "pose", "obb")
DEFAULT_MAX_DETS: Final[Mapping[str, int]] = {"box": 100, "mask": 100, "pose": 20, "obb": 100}


class MeanAveragePrecision:
    """Accumulates predictions and targets batch by batch; computes COCO mAP50-95, mAP50, P, R.

    Args:
        kinds: which overlaps to evaluate, any of ``"box"``, ``"mask"``, ``"pose"``, ``"obb"``;
            each reads its geometry field (boxes, masks, keypoints, rboxes) from both records.
        max_dets: per-kind override of the predictions kept per image and class
            (:data:`DEFAULT_MAX_DETS`).
        sigmas: OKS sigmas for ``pose``, one per keypoint; default
            :func:`~lucid_yolo.train.metrics.keypoint_similarity.keypoint_sigmas` of K.
        replay_matching: on a CUDA device, replay each batch's matching from CUDA graphs
            (:class:`~lucid_yolo.train.metrics.match_replay.MatchReplay`): the same matches,
            a few launches instead of a few hundred.
        mask_scratch: the context a batch's masks are built and scored in, image by image
            (both producers are called inside it): everything allocated there is freed before
            it ends, so a producer that keeps device tensors makes them before (a replayed fit
            lends its graph pool's free blocks there, :class:`~lucid_yolo.replay.ScratchLoan`,
            since those masks are a validation pass's largest tensors).

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
        replay_matching: bool = False,
        mask_scratch: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
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
        self.replay_matching = replay_matching
        self.mask_scratch = mask_scratch
        self._match_replays: dict[torch.device, MatchReplay] = {}

    @property
    def matching_telemetry(self) -> Telemetry:
        """The replayed matching's counters over every device (all zero when it does not
        replay)."""
        return merge_telemetry(*(replay.telemetry for replay in self._match_replays.values()))

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
        """Match one batch of images given image by image (see :meth:`update_batch`).

        The records are checked and padded into one batch
        (:meth:`BatchPredictions.from_images`); every image's masks are alive until the
        batch is matched.

        Args:
            predictions: per image, decoded predictions in source-image pixels.
            targets: per image, ground truth in the same pixels; same length and order.
            image_ids: per image, its index in the dataset (see :meth:`update_batch`).

        Raises:
            MetricsInputError: the sequences differ in length, or a record lacks a field the
                kinds read or has a field of the wrong shape.
        """
        pred_images: list[ImagePredictions] = []
        target_images: list[ImageTargets] = []
        pairs = zip(predictions, targets, strict=True)
        while True:
            try:
                prediction, target = next(pairs)
            except StopIteration:
                break
            except ValueError as error:  # zip's strict check: one ran out before the other
                raise MetricsInputError(
                    f"prediction and target records differ in number (one ran out after "
                    f"{len(pred_images)!r} images): pass one of each per image, in the same order"
                ) from error
            for kind in self.kinds:
                _check_image(kind, prediction, target)
            pred_images.append(prediction)
            target_images.append(target)
        if not pred_images:
            _check_image_ids(0, image_ids)
            return
        self.update_batch(
            BatchPredictions.from_images(pred_images),
            BatchTargets.from_images(target_images),
            image_ids=image_ids,
        )

    @torch.no_grad()
    def update_batch(
        self,
        predictions: BatchPredictions,
        targets: BatchTargets,
        image_ids: Sequence[int] | Tensor | None = None,
    ) -> None:
        """Match a padded batch of images and keep the per-prediction outcome, on its device.

        The whole batch is ordered, overlapped and matched at once
        (:func:`~lucid_yolo.train.metrics.coco_matching.match_batch`); only masks get their
        overlaps image by image, built when asked, one image's alive at a time.
        Nothing here waits for the device. Records on the CPU are checked for negative class
        ids here; on another device, by ``compute``.

        Args:
            predictions: B images' decoded predictions in source-image pixels.
            targets: the same B images' ground truth in the same pixels.
            image_ids: per image, its index in the dataset (a sequence or a (B,) tensor, which
                may stay on the device). With ids, ``compute`` scores the images in id order
                and an id seen again counts once (a distributed sampler that pads its shards
                repeats images); without, images count in update order. Pass them on every
                update or on none.

        Raises:
            MetricsInputError: the records hold another number of images than each other or
                than ``image_ids``, or lack a field the kinds read.
        """
        B = predictions.scores.shape[0]
        if targets.classes.shape[0] != B:
            raise MetricsInputError(
                f"got {B!r} images of predictions and {targets.classes.shape[0]!r} of targets: "
                "pass one of each per image, in the same order"
            )
        _check_image_ids(B, image_ids)
        if B == 0:
            return
        self._keep_scored(self.score_batch(predictions, targets), image_ids)

    @torch.no_grad()
    def score_batch(self, predictions: BatchPredictions, targets: BatchTargets) -> ScoredBatch:
        """Order, rank, overlap and bound the matching of a padded batch, for every kind.

        A function of its arguments and of the accumulator's options alone (``kinds``,
        ``max_dets``, ``sigmas``: a graph holds them as they were when it was recorded, so they
        are not to change after construction): it keeps nothing of the batch and, off the CPU
        and for every kind but masks, never waits for the device nor reads a tensor on the
        host, so a CUDA graph can hold it
        (:class:`~lucid_yolo.train.scoring_replay.ScoringReplay`). Masks call their
        producers image by image inside :attr:`mask_scratch`.

        Args:
            predictions: B images' decoded predictions in source-image pixels.
            targets: the same B images' ground truth in the same pixels.
        """
        device = predictions.scores.device
        pred_valid = predictions.valid.to(device=device, dtype=torch.bool)
        target_valid = targets.valid.to(device=device, dtype=torch.bool)
        pred_classes = predictions.classes.to(device=device, dtype=torch.int64)
        target_classes = targets.classes.to(device=device, dtype=torch.int64)
        lowest_classes = torch.stack(
            [_lowest(pred_classes, pred_valid), _lowest(target_classes, target_valid)]
        )
        score = predictions.scores.detach().to(torch.float64)
        order = _without_padding(_matching_order(score, pred_valid), pred_valid)  # (B, D')
        classes = pred_classes.gather(1, order)
        ranked_valid = pred_valid.gather(1, order)
        class_rank = _rank_within_class(classes, ranked_valid)
        same_class = classes[:, :, None] == target_classes[:, None, :]  # (B, D, G)
        reusable = targets.ignore_flags().to(device)
        kinds = {}
        for kind in self.kinds:
            kept = ranked_valid & (class_rank < self.max_dets[kind])  # (B, D) along ``order``
            possible = kept[:, :, None] & same_class & target_valid[:, None, :]  # (B, D, G)
            overlaps = self._batch_overlaps(kind, predictions, targets, order, possible)
            overlaps = torch.where(possible, overlaps.to(device), -1.0)
            ignore = self._target_ignore(kind, targets).to(device)
            kinds[kind] = ScoredKind(
                overlaps=overlaps,
                ignore=ignore,
                reusable=reusable,
                scores=score.gather(1, order),
                classes=classes,
                kept=kept,
                target_classes=target_classes,
                counted=target_valid & ~ignore,
                extent=match_extent(overlaps, reusable),
            )
        return ScoredBatch(kinds, lowest_classes)

    @torch.no_grad()
    def add_scored(
        self, scored: ScoredBatch, image_ids: Sequence[int] | Tensor | None = None
    ) -> None:
        """Keep a batch :meth:`score_batch` scored; it is matched at the next update.

        Args:
            scored: the batch, scored with this accumulator's kinds and options.
            image_ids: per image, its index in the dataset (see :meth:`update_batch`).

        Raises:
            MetricsInputError: the batch was scored for other kinds, or holds another number
                of images than ``image_ids``; on the CPU, a real row has a negative class id.
        """
        if tuple(scored.kinds) != self.kinds:
            raise MetricsInputError(
                f"a batch scored for kinds {tuple(scored.kinds)!r} was given to an accumulator "
                f"of {self.kinds!r}: score it with this accumulator's score_batch"
            )
        _check_image_ids(scored.kinds[self.kinds[0]].scores.shape[0], image_ids)
        self._keep_scored(scored, image_ids)

    def _keep_scored(self, scored: ScoredBatch, image_ids: Sequence[int] | Tensor | None) -> None:
        """:meth:`add_scored` once its arguments are checked (``update_batch`` checked its own)."""
        self._check_class_ids(scored.lowest_classes)
        ids = None if image_ids is None else torch.as_tensor(image_ids, dtype=torch.int64)
        pending = {kind: PendingBatch.start(scored.kinds[kind], ids) for kind in self.kinds}
        self._settle()
        self._pending = pending

    def _settle(self) -> None:
        """Match the batch left pending by the last ``update`` (its extent is on the host now)."""
        for kind, pending in self._pending.items():
            self._records[kind].batches.append(pending.finish(self._matcher(pending.overlaps)))
        self._pending = {}

    def _matcher(self, overlaps: Tensor) -> Matcher:
        """How to match a batch on ``overlaps``' device: replayed there, or eagerly."""
        device = overlaps.device
        if not (self.replay_matching and device.type == "cuda"):
            return match_batch
        if device not in self._match_replays:
            self._match_replays[device] = MatchReplay(device)
        return self._match_replays[device]

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

    def _check_class_ids(self, lowest: Tensor) -> None:
        """Negative class ids of real rows (``lowest``: :attr:`ScoredBatch.lowest_classes`):
        raised now on the CPU, by ``compute`` elsewhere."""
        if lowest.device.type == "cpu":
            _raise_negative_class(lowest)
        else:
            self._lowest_classes.append(lowest)

    def _check_deferred_class_ids(self) -> None:
        if self._lowest_classes:
            lowest = torch.stack([v.cpu() for v in self._lowest_classes]).amin(dim=0)
            _raise_negative_class(lowest)

    def _batch_overlaps(
        self,
        kind: str,
        predictions: BatchPredictions,
        targets: BatchTargets,
        order: Tensor,
        possible: Tensor,
    ) -> Tensor:
        """(B, D', G) float64 overlaps along ``order``, right at least where ``possible``.

        Boxes, keypoints and rotated boxes are computed for the whole batch at once; masks image
        by image (:func:`_image_overlaps`), on the CPU only for the rows and columns that hold a
        pair (rotated boxes clip only the candidate pairs on the CPU, :func:`rotated_overlaps`).

        Args:
            kind: the overlap kind.
            predictions: the batch's predictions, rows in input order.
            targets: the batch's targets.
            order: (B, D') int64, each image's rows in matching order (D' <= D: the padding
                may be cut, :func:`_without_padding`).
            possible: (B, D', G) bool along ``order``: pairs that can match.
        """
        crowd = targets.crowd_flags()
        if kind == "box":
            p_boxes = _ordered(
                _require(predictions.boxes, "BatchPredictions", kind, "boxes"), order
            )
            t_boxes = _require(targets.boxes, "BatchTargets", kind, "boxes")
            return box_overlaps(p_boxes, t_boxes.to(p_boxes.device), crowd)
        if kind == "pose":
            p_kpts = _require(predictions.keypoints, "BatchPredictions", kind, "keypoints")
            t_kpts = _require(targets.keypoints, "BatchTargets", kind, "keypoints")
            t_boxes = _require(targets.boxes, "BatchTargets", kind, "boxes")
            areas = targets.areas
            if areas is None:
                areas = (t_boxes[..., 2] - t_boxes[..., 0]) * (t_boxes[..., 3] - t_boxes[..., 1])
            return keypoint_similarity(
                _ordered(p_kpts, order), t_kpts, t_boxes, areas, self._sigmas(t_kpts)
            )
        if kind == "obb":
            p_rboxes = _require(predictions.rboxes, "BatchPredictions", kind, "rboxes")
            t_rboxes = _require(targets.rboxes, "BatchTargets", kind, "rboxes")
            return rotated_overlaps(_ordered(p_rboxes, order), t_rboxes, crowd, pairs=possible)
        B, D, G = (*predictions.scores.shape, possible.shape[2])  # D: every input row
        # masks: image by image (each at its image's size), in input order (the rows the
        # producer built masks for), then put along ``order`` with the other kinds. On the CPU
        # only the rows and columns that hold a pair are computed; elsewhere every pair is, and
        # the caller's ``where(possible, ...)`` keeps the ones that can match
        pairs = None
        if host_shortcuts.taken(possible.device):
            pairs = possible.new_zeros((B, D, G)).scatter_(
                1, order[..., None].expand(possible.shape), possible
            )
        overlaps = torch.full((B, D, G), -1.0, dtype=torch.float64, device=possible.device)
        p_masks_of = _require(predictions.masks, "BatchPredictions", kind, "masks")
        t_masks_of = _require(targets.masks, "BatchTargets", kind, "masks")
        with self.mask_scratch():
            for i in range(B):
                _put_image_mask_overlaps(overlaps, i, p_masks_of(i), t_masks_of(i), crowd, pairs)
        return _ordered(overlaps, order)

    def _sigmas(self, target_keypoints: Tensor) -> Tensor:
        K = target_keypoints.shape[-2]
        sigmas = keypoint_sigmas(K) if self.sigmas is None else self.sigmas
        if sigmas.shape != (K,):
            raise MetricsInputError(
                f"got {sigmas.shape[0]!r} OKS sigmas for {K!r} keypoints: pass one per keypoint"
            )
        return float64_constant(tuple(sigmas.tolist()), target_keypoints.device)

    @staticmethod
    def _target_ignore(kind: str, targets: BatchTargets) -> Tensor:
        """(B, G) bool: targets that do not count (crowd, difficult; pose: no visible point)."""
        ignore = targets.ignore_flags()
        if kind == "pose":
            keypoints = _require(targets.keypoints, "BatchTargets", kind, "keypoints")
            ignore = ignore | ~(keypoints[..., 2] > 0).any(dim=-1).to(ignore.device)
        return ignore


def _matching_order(scores: Tensor, valid: Tensor) -> Tensor:
    """COCO's order of each image's predictions: real ones by descending score, then padding.

    Args:
        scores: (B, D) float64.
        valid: (B, D) bool, real predictions.

    Returns:
        (B, D) int64 row indices; ties keep input order (a stable sort, as in COCO).
    """
    return torch.argsort(torch.where(valid, -scores, torch.inf), dim=1, stable=True)


def _without_padding(order: Tensor, valid: Tensor) -> Tensor:
    """Where the host's shortcuts are taken (:mod:`.host_shortcuts`), ``order`` cut after the last
    image's real rows; elsewhere ``order`` as it is.

    Padding rows come last in ``order`` and take part in nothing, so they can be left out of
    every later step (overlaps, matching, records), which on the CPU costs most of the work of
    a low confidence cut's padded batch. Finding the cut needs the row counts on the host, a
    wait for the device elsewhere (issue 11), so other devices keep every row.

    Args:
        order: (B, D) int64, each image's rows in matching order, real rows first.
        valid: (B, D) bool, real rows.
    """
    if not host_shortcuts.taken(order.device):
        return order
    return order[:, : int(valid.sum(dim=1).max())]


def _rank_within_class(classes: Tensor, valid: Tensor) -> Tensor:
    """(B, D) int64: how many real rows of the same class come before each row (0: the best).

    Args:
        classes: (B, D) int64 along the matching order.
        valid: (B, D) bool along the matching order.

    Padding rows rank among themselves; callers keep only real rows.
    """
    B, D = classes.shape
    grouped_by = torch.where(valid, classes, torch.iinfo(torch.int64).max)
    by_class = torch.argsort(grouped_by, dim=1, stable=True)  # groups classes, keeps score order
    grouped = grouped_by.gather(1, by_class)
    starts = torch.searchsorted(grouped, grouped, side="left")  # (B, D) first row of the class
    position = torch.arange(D, device=classes.device).expand(B, D)
    return torch.empty_like(by_class).scatter_(1, by_class, position - starts)


def _ordered(values: Tensor, order: Tensor) -> Tensor:
    """``values`` (B, D, *rest) with each image's rows along ``order`` (B, D)."""
    index = order.reshape(*order.shape, *(1,) * (values.ndim - 2)).to(values.device)
    return values.gather(1, index.expand(*order.shape, *values.shape[2:]))


_Field = TypeVar("_Field")


def _require(value: _Field | None, owner: str, kind: str, name: str) -> _Field:
    """``value``, or the error that names the missing field of a batch record."""
    if value is None:
        raise MetricsInputError(
            f"metric kind {kind!r} reads {owner}.{name}, which is None: pass {name}=... "
            f"or drop {kind!r} from the metric's kinds"
        )
    return value


def _image_overlaps(overlap: Callable[[Tensor, Tensor], Tensor], pairs: Tensor) -> Tensor:
    """(n, m) float64 overlaps of one image at ``pairs``, -1 elsewhere, computed only for the
    prediction rows and target columns that hold a pair (the CPU's path,
    :mod:`.host_shortcuts`).

    Args:
        overlap: ``overlap(rows, cols)``: the overlaps of those prediction rows with those
            target columns.
        pairs: (n, m) bool CPU tensor, the pairs that can match.
    """
    rows = torch.nonzero(pairs.any(dim=1)).squeeze(1)
    cols = torch.nonzero(pairs.any(dim=0)).squeeze(1)
    out = torch.full(pairs.shape, -1.0, dtype=torch.float64)
    inner = pairs[rows][:, cols]
    out[rows[:, None], cols[None, :]] = torch.where(inner, overlap(rows, cols).cpu(), -1.0)
    return out


def _put_image_mask_overlaps(
    overlaps: Tensor,
    i: int,
    predicted: tuple[Tensor, Tensor],
    target: tuple[Tensor, Tensor],
    crowd: Tensor,
    pairs: Tensor | None,
) -> None:
    """Write image ``i``'s mask overlaps into ``overlaps[i]`` at the rows and columns its masks
    were built for (``predicted``, ``target``: masks and rows, :data:`ImageMasks`).

    A function of its own so that the image's masks and every temporary die when it returns;
    a loop would keep one image's masks alive while the next image's are built (two images'
    masks at once, 235 MB beside a replayed segment fit's graph pool at 640 px, issue 11).
    """
    (p_masks, p_rows), (t_masks, t_rows) = predicted, target
    p_rows, t_rows = p_rows.to(overlaps.device), t_rows.to(overlaps.device)
    image_pairs = None if pairs is None else pairs[i][p_rows][:, t_rows]  # (r, s)
    image = _mask_overlaps(p_masks, t_masks, crowd[i][t_rows], image_pairs)
    overlaps[i, p_rows[:, None], t_rows[None, :]] = image.to(overlaps.device)


def _mask_overlaps(p_masks: Tensor, t_masks: Tensor, crowd: Tensor, pairs: Tensor | None) -> Tensor:
    """One image's (n, m) mask overlaps: at ``pairs`` and -1 elsewhere (:func:`_image_overlaps`),
    or every pair when ``pairs`` is ``None``.

    Raises:
        MetricsInputError: the masks are of different sizes.
    """
    if p_masks.shape[1:] != t_masks.shape[1:]:
        raise MetricsInputError(
            f"prediction masks are {tuple(p_masks.shape[1:])!r} but target masks are "
            f"{tuple(t_masks.shape[1:])!r}: resize both to the source image (H, W)"
        )
    if pairs is None:
        return mask_overlaps(p_masks, t_masks, crowd)
    return _image_overlaps(
        lambda rows, cols: mask_overlaps(p_masks[rows], t_masks[cols], crowd[cols]), pairs
    )


_GEOMETRY = {"box": ("boxes",), "mask": ("masks",), "pose": ("keypoints",), "obb": ("rboxes",)}


def _check_image(kind: str, pred: ImagePredictions, target: ImageTargets) -> None:
    """The fields ``kind`` reads, present and of the documented shapes, in one image's records.

    Raises:
        MetricsInputError: a field is missing or has another shape than the module table's.
    """
    require_fields(pred, ("scores", "classes", *_GEOMETRY[kind]), kind)
    pose = ("keypoints", "boxes", *(() if target.areas is None else ("areas",)))
    require_fields(target, ("classes", *(pose if kind == "pose" else _GEOMETRY[kind])), kind)
    pred.valid_flags()  # each raises on flags of another shape than the record's
    target.valid_flags()
    target.ignore_flags()
    if kind == "pose":
        p_kpts, t_kpts = pred.keypoints, target.keypoints
        assert p_kpts is not None  # required above
        assert t_kpts is not None
        if p_kpts.ndim != 3 or t_kpts.ndim != 3 or p_kpts.shape[1] != t_kpts.shape[1]:
            raise MetricsInputError(
                f"prediction keypoints are {tuple(p_kpts.shape)!r} and target keypoints "
                f"{tuple(t_kpts.shape)!r}: expected (n, K, 3) and (m, K, 3) with the same K"
            )


def _check_image_ids(images: int, image_ids: Sequence[int] | Tensor | None) -> None:
    """Raise unless ``image_ids`` is ``None`` or holds one id per image."""
    if image_ids is not None and len(image_ids) != images:
        raise MetricsInputError(
            f"got {images!r} images and {len(image_ids)!r} image ids: pass one id per image, "
            "in the same order"
        )


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
