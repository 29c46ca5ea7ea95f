"""COCO-style mAP accumulator for boxes, masks, keypoints (OKS) and rotated boxes.

Usage::

    metric = MeanAveragePrecision(kinds=("box", "mask"))
    for batch in loader:
        metric.update(predictions_per_image, targets_per_image)
    metric.compute()  # {"box/mAP50-95": ..., "box/mAP50": ..., "box/P": ..., "box/R": ...,
                      #  "mask/mAP50-95": ..., ...}

``update`` does the per-image work (sorting, the overlap matrix on the inputs' device), matches
the batch's images together (greedy matching on the CPU) and keeps only a few numbers per
prediction, so masks are never stored; ``compute`` runs COCO's accumulation over everything seen
since the last ``reset``.

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
from dataclasses import dataclass
from typing import Final

import numpy as np
import torch
from torch import Tensor

from lucid_yolo.train.metrics.coco_matching import (
    IOU_THRESHOLDS,
    ImageMatches,
    ImageOverlaps,
    match_images,
)
from lucid_yolo.train.metrics.image_instances import (
    ImagePredictions,
    ImageTargets,
    MetricsInputError,
    require_fields,
)
from lucid_yolo.train.metrics.keypoint_similarity import keypoint_sigmas, keypoint_similarity
from lucid_yolo.train.metrics.overlaps import box_overlaps, mask_overlaps
from lucid_yolo.train.metrics.precision_curves import (
    MatchedPredictions,
    best_f1_precision_recall,
    interpolated_precision,
    summarize_precision,
)
from lucid_yolo.train.metrics.rotated_overlap import rotated_overlaps

KINDS: Final = ("box", "mask", "pose", "obb")
DEFAULT_MAX_DETS: Final[Mapping[str, int]] = {"box": 100, "mask": 100, "pose": 20, "obb": 100}


class _KindRecords:
    """What ``update`` keeps for one kind: per image, its predictions' results and target counts.

    Kept per image, with the image's id when the caller gives one, so that records merged from
    several processes can be put back in dataset order and a repeated image counted once.
    """

    def __init__(self) -> None:
        self.scores: list[np.ndarray] = []
        self.classes: list[np.ndarray] = []
        self.matched: list[np.ndarray] = []
        self.ignored: list[np.ndarray] = []
        self.target_counts: list[np.ndarray] = []
        self.image_ids: list[int | None] = []

    def add_image(
        self,
        scores: np.ndarray,
        classes: np.ndarray,
        match: ImageMatches,
        target_counts: np.ndarray,
        image_id: int | None,
    ) -> None:
        self.scores.append(scores)
        self.classes.append(classes)
        self.matched.append(match.matched)
        self.ignored.append(match.ignored)
        self.target_counts.append(target_counts)
        self.image_ids.append(image_id)

    def extend(self, other: _KindRecords) -> None:
        self.scores += other.scores
        self.classes += other.classes
        self.matched += other.matched
        self.ignored += other.ignored
        self.target_counts += other.target_counts
        self.image_ids += other.image_ids

    def image_order(self) -> np.ndarray:
        """Indices of the images to score: in update order, or by id with repeats dropped.

        Raises:
            MetricsInputError: some images were given an id and others not.
        """
        given = [i for i in self.image_ids if i is not None]
        if not given:
            return np.arange(len(self.image_ids))
        if len(given) != len(self.image_ids):
            raise MetricsInputError(
                f"{len(self.image_ids) - len(given)!r} of {len(self.image_ids)!r} images were "
                "updated without an image id: pass image_ids on every update or on none"
            )
        _, first = np.unique(np.asarray(given, dtype=np.int64), return_index=True)
        return first

    def gather(self) -> MatchedPredictions:
        T = IOU_THRESHOLDS.shape[0]
        order = self.image_order()
        scores = [np.zeros(0), *(self.scores[i] for i in order)]
        classes = np.concatenate([np.zeros(0, dtype=np.int64), *(self.classes[i] for i in order)])
        matched = [np.zeros((T, 0), dtype=bool), *(self.matched[i] for i in order)]
        ignored = [np.zeros((T, 0), dtype=bool), *(self.ignored[i] for i in order)]
        kept_counts = [self.target_counts[i] for i in order]
        num_classes = max(
            max((c.shape[0] for c in kept_counts), default=0), int(classes.max(initial=-1)) + 1
        )
        counts = np.zeros(num_classes, dtype=np.int64)
        for image_counts in kept_counts:
            counts[: image_counts.shape[0]] += image_counts
        return MatchedPredictions(
            scores=np.concatenate(scores),
            classes=classes,
            matched=np.concatenate(matched, axis=1),
            ignored=np.concatenate(ignored, axis=1),
            target_counts=counts,
        )


@dataclass(frozen=True)
class _PreparedImage:
    """One image's part of an update for one kind: what matching and the records need."""

    overlaps: ImageOverlaps
    scores: np.ndarray
    """(D,) float64 scores of the kept predictions, in matching order."""
    classes: np.ndarray
    """(D,) int64 classes of the kept predictions."""
    counts: np.ndarray
    """Counted (not ignored) targets per class id (``np.bincount``)."""


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
        self._records = {kind: _KindRecords() for kind in self.kinds}

    def reset(self) -> None:
        """Forget everything seen so far (call at the start of each validation epoch)."""
        self._records = {kind: _KindRecords() for kind in self.kinds}

    @torch.no_grad()
    def update(
        self,
        predictions: Iterable[ImagePredictions],
        targets: Iterable[ImageTargets],
        image_ids: Sequence[int] | None = None,
    ) -> None:
        """Match one batch of images and keep the per-prediction outcome.

        The images are read one pair at a time and only their overlaps are kept, so a caller
        may pass generators that build each image's records (dense masks at source size) when
        asked: one image's masks are alive at a time. The greedy matching then runs over the
        whole batch at once, which costs about as much as one image.

        Args:
            predictions: per image, decoded predictions in source-image pixels.
            targets: per image, ground truth in the same pixels; same length and order.
            image_ids: per image, its index in the dataset. With ids, ``compute`` scores the
                images in id order and an id seen again counts once (a distributed sampler that
                pads its shards repeats images); without, images count in update order. Pass
                them on every update or on none.

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
            for kind in self.kinds:
                prepared[kind].append(self._prepare(kind, prediction, target))
        if image_ids is not None and len(image_ids) != images:
            raise MetricsInputError(
                f"got {images!r} images and {len(image_ids)!r} image ids: pass one id per "
                "image, in the same order"
            )
        ids: Sequence[int | None] = [None] * images if image_ids is None else image_ids
        for kind, kind_images in prepared.items():
            matches = match_images([image.overlaps for image in kind_images])
            records = self._records[kind]
            for image, match, image_id in zip(kind_images, matches, ids, strict=True):
                records.add_image(image.scores, image.classes, match, image.counts, image_id)

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
        for kind in self.kinds:
            self._records[kind].extend(other._records[kind])

    def compute(self) -> dict[str, float]:
        """COCO accumulation over everything seen since the last ``reset``.

        Returns:
            ``{"<kind>/mAP50-95", "<kind>/mAP50", "<kind>/P", "<kind>/R"}`` for every kind; the
            mAPs are 0.0 when no target was counted.
        """
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
        precision = interpolated_precision(self._records[kind].gather())  # (T, R, C)
        return {
            c: (float(precision[:, :, c].mean()), float(precision[0, :, c].mean()))
            for c in range(precision.shape[2])
            if precision[0, 0, c] > -1
        }

    def _prepare(self, kind: str, pred: ImagePredictions, target: ImageTargets) -> _PreparedImage:
        """Sort and truncate one image's predictions, and build its overlap matrix for ``kind``."""
        scores, pred_classes = require_fields(pred, ("scores", "classes"), kind)
        (target_classes,) = require_fields(target, ("classes",), kind)
        for name, value in (("predictions", pred_classes), ("targets", target_classes)):
            if value.numel() and int(value.min()) < 0:
                raise MetricsInputError(
                    f"{name} hold class id {int(value.min())!r}: class ids must be >= 0 "
                    "(drop padded rows before the metric)"
                )
        score_np = scores.detach().cpu().to(torch.float64).numpy()
        class_np = pred_classes.detach().cpu().numpy().astype(np.int64)
        keep = _top_per_class(score_np, class_np, self.max_dets[kind])
        same_class = class_np[keep][:, None] == target_classes.cpu().numpy()[None, :]  # (D, G)
        candidates = same_class.any(axis=1)  # predictions without a same-class target never match
        index = torch.from_numpy(keep[candidates]).to(scores.device)
        overlaps = np.full(same_class.shape, -1.0)
        overlaps[candidates] = self._overlaps(kind, pred, target, index).cpu().numpy()
        ignore = self._target_ignore(kind, target).cpu().numpy()
        image = ImageOverlaps(
            overlaps=np.where(same_class, overlaps, -1.0),
            ignore=ignore,
            reusable=target.ignore_flags().cpu().numpy(),
        )
        counted = target.classes.cpu().numpy().astype(np.int64)[~ignore]
        return _PreparedImage(image, score_np[keep], class_np[keep], np.bincount(counted))

    def _overlaps(
        self, kind: str, pred: ImagePredictions, target: ImageTargets, index: Tensor
    ) -> Tensor:
        """(D, G) float64 overlap of the kept predictions (``index``) with every target."""
        crowd = target.crowd_flags()
        if kind == "box":
            (p_boxes,) = require_fields(pred, ("boxes",), kind)
            (t_boxes,) = require_fields(target, ("boxes",), kind)
            return box_overlaps(p_boxes[index], t_boxes.to(p_boxes.device), crowd)
        if kind == "mask":
            (p_masks,) = require_fields(pred, ("masks",), kind)
            (t_masks,) = require_fields(target, ("masks",), kind)
            if p_masks.shape[1:] != t_masks.shape[1:]:
                raise MetricsInputError(
                    f"prediction masks are {tuple(p_masks.shape[1:])!r} but target masks are "
                    f"{tuple(t_masks.shape[1:])!r}: resize both to the source image (H, W)"
                )
            return mask_overlaps(p_masks[index], t_masks, crowd)
        if kind == "pose":
            (p_kpts,) = require_fields(pred, ("keypoints",), kind)
            t_kpts, t_boxes = require_fields(target, ("keypoints", "boxes"), kind)
            if p_kpts.ndim != 3 or t_kpts.ndim != 3 or p_kpts.shape[1] != t_kpts.shape[1]:
                raise MetricsInputError(
                    f"prediction keypoints are {tuple(p_kpts.shape)!r} and target keypoints "
                    f"{tuple(t_kpts.shape)!r}: expected (n, K, 3) and (m, K, 3) with the same K"
                )
            return keypoint_similarity(
                p_kpts[index],
                t_kpts,
                t_boxes,
                self._target_areas(target, t_boxes),
                self._sigmas(t_kpts),
            )
        (p_rboxes,) = require_fields(pred, ("rboxes",), kind)
        (t_rboxes,) = require_fields(target, ("rboxes",), kind)
        p_classes = pred.classes.to(p_rboxes.device)[index]
        same_class = p_classes[:, None] == target.classes.to(p_rboxes.device)[None, :]
        return rotated_overlaps(p_rboxes[index], t_rboxes, crowd, pairs=same_class)

    def _sigmas(self, target_keypoints: Tensor) -> Tensor:
        K = target_keypoints.shape[1]
        sigmas = keypoint_sigmas(K) if self.sigmas is None else self.sigmas
        if sigmas.shape != (K,):
            raise MetricsInputError(
                f"got {sigmas.shape[0]!r} OKS sigmas for {K!r} keypoints: pass one per keypoint"
            )
        return sigmas

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


def _top_per_class(scores: np.ndarray, classes: np.ndarray, max_dets: int) -> np.ndarray:
    """Indices of each class's ``max_dets`` best predictions, in descending score order overall.

    Args:
        scores: (n,) float64.
        classes: (n,) int64.
        max_dets: predictions kept per class.

    Returns:
        (D,) int64 indices into the inputs; ties keep input order (stable sort), as in COCO.
    """
    by_score = np.argsort(-scores, kind="stable")
    ranked_classes = classes[by_score]
    by_class = np.argsort(ranked_classes, kind="stable")  # groups classes, keeps score order
    sorted_classes = ranked_classes[by_class]
    starts = np.searchsorted(sorted_classes, sorted_classes, side="left")
    rank = np.empty_like(by_class)
    rank[by_class] = np.arange(by_class.shape[0]) - starts
    return by_score[rank < max_dets].astype(np.int64)


__all__ = ["DEFAULT_MAX_DETS", "KINDS", "MeanAveragePrecision"]
