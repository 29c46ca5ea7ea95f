"""From raw validation outputs to COCO-style metrics in source-image pixels.

Predictions are decoded on the deployed path (one-to-one branch, top-k, no NMS), then mapped back
through the letterbox to the pixels of the source image, where the ground truth is defined; the
targets of the padded batch take the same way back. Each task evaluates its own kinds and names
one of them its fitness (the checkpoint monitor): box for detect, mask for segment, pose for pose,
obb for obb.

Masks are scored as COCO scores them (issue 13):

* ground truth: each instance's annotation in source pixels (``Batch["source_shapes"]``) made a
  mask at the source image's size, not the quarter-resolution training targets: a COCO RLE
  decoded as given (holes kept), a polygon rasterised
  (:func:`~lucid_yolo.train.geometry.source_masks`), once per image: they are kept across passes
  (:class:`~lucid_yolo.train.source_mask_cache.SourceMaskCache`);
* predictions: each instance's prototype logits are sampled straight at the source pixels'
  centres (the letterbox padding cropped and the image resized in one bilinear step), then
  thresholded at probability 0.5, then cropped to the box in source pixels
  (:func:`~lucid_yolo.models.decode.resample_masks`);
* crowds: instances the batch flags ``ignore`` are COCO crowds for boxes, masks and keypoints
  (scored by intersection over the prediction's area) and DOTA difficult instances for rotated
  boxes (scored by IoU), the only two formats that set the flag.

A batch is decoded and scored as one padded batch (each image's ``max_det`` top-k rows with
a ``valid`` flag for the confidence cut, the batch's padded target rows with its ``valid``
mask: :meth:`MeanAveragePrecision.score_batch`): one operation per step for the whole batch,
where a loop over images launched one per image (issue 11, session 6: the metric update was
the largest phase of a GPU pass, and a detect batch's torch operations fell from 178 to 31
per image). Masks are built image by image when the metric reaches the image, so the
largest mask stack alive is one image's ``max_det × H × W`` bytes of predictions plus its
targets.

Validation at GPU speed (issue 11): every shape is static, so that neither ``update`` nor the
metric waits for the device. Masks need each image's source size on the host (their buffers
are allocated at that size): a mask batch starts copying its sizes, instance counts and
which prediction rows can pair to the host and is scored one ``update`` later, when the copy
has long finished (:class:`~lucid_yolo.train.host_copy.HostCopy`); only the rows that can pair
(above the confidence cut, of a class some target of the image has) get masks, and only the
real instances. It runs with autocast off, so
a bf16 validation step decodes and builds masks in float32 as ``predict`` and a CPU run do
(under autocast their matrix products would round to bf16).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields, replace
from typing import cast

import torch
from torch import Tensor

from lucid_yolo.models.decode import (
    Detections,
    decode_dense,
    decode_end2end,
    resample_grid,
    resample_masks,
    topk_dense,
)
from lucid_yolo.models.outputs import O2O, PROTOS
from lucid_yolo.replay import Telemetry, merge_telemetry
from lucid_yolo.train.data.augment.letterbox import (
    unletterbox_boxes,
    unletterbox_points,
    unletterbox_rboxes,
)
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.geometry import SourceShape
from lucid_yolo.train.host_copy import HostCopy
from lucid_yolo.train.metrics import (
    BatchPredictions,
    BatchTargets,
    ImagePredictions,
    ImageTargets,
    MeanAveragePrecision,
    MetricsInputError,
    ScoredBatch,
    flat_tensors,
    from_flat_tensors,
    gather_across_ranks,
)
from lucid_yolo.train.scoring_replay import Scoring, ScoringReplay, ScoringValue
from lucid_yolo.train.source_mask_cache import SourceMaskCache

TASK_KINDS: dict[str, tuple[str, ...]] = {
    "detect": ("box",),
    "segment": ("box", "mask"),
    "pose": ("box", "pose"),
    "obb": ("obb",),
}
"""Metric kinds evaluated per task."""

FITNESS_KIND: dict[str, str] = {"detect": "box", "segment": "mask", "pose": "pose", "obb": "obb"}
"""The kind whose mAP50-95 is the task's fitness."""


class Evaluator:
    """Decodes, un-letterboxes and accumulates one task's metrics.

    Args:
        task: ``detect``, ``segment``, ``pose`` or ``obb``.
        strides: the network's strides.
        conf: score threshold of kept predictions.
        max_det: top-k detections per image.
        replay_scoring: on a GPU, replay each batch's scoring (top-k, source pixels, and for
            boxes, keypoints and rotated boxes the order and overlaps; for masks the part
            before them: :mod:`~lucid_yolo.train.scoring_replay`) and its matching (every kind:
            :class:`~lucid_yolo.train.metrics.MeanAveragePrecision`'s ``replay_matching``) from
            CUDA graphs: the same metrics with a few launches a batch instead of a few hundred.
        mask_scratch: the context a batch's masks are built and scored in
            (:class:`~lucid_yolo.train.metrics.MeanAveragePrecision`'s option; a replayed fit
            lends its graph pool's free blocks there). What is kept across batches is made
            before it: the predictions' sampling tables
            (:func:`~lucid_yolo.models.decode.resample_grid`); the targets' masks are kept on
            the host (:class:`~lucid_yolo.train.source_mask_cache.SourceMaskCache`).

    OKS sigmas follow the keypoint count of the targets (COCO's for 17 points, see
    :func:`lucid_yolo.train.geometry.keypoint_ops.keypoint_sigmas`).
    """

    def __init__(
        self,
        task: str,
        *,
        strides: Sequence[int],
        conf: float,
        max_det: int,
        replay_scoring: bool = False,
        mask_scratch: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    ) -> None:
        if task not in TASK_KINDS:
            raise TrainConfigError(f"unknown task {task!r}: expected one of {sorted(TASK_KINDS)!r}")
        self.task = task
        self.strides = tuple(strides)
        self.conf = conf
        self.max_det = max_det
        self.metric = MeanAveragePrecision(
            kinds=TASK_KINDS[task], replay_matching=replay_scoring, mask_scratch=mask_scratch
        )
        self.replay_scoring = replay_scoring
        self._scoring_replays: dict[torch.device, ScoringReplay] = {}
        self._waiting: _WaitingForSizes | None = None
        self._source_masks = SourceMaskCache()  # kept across passes: the set does not change

    @property
    def scoring_telemetry(self) -> Telemetry:
        """The replayed scoring's counters over every device (all zero when it does not
        replay: on the CPU, or with ``replay_scoring`` off)."""
        return merge_telemetry(*(replay.telemetry for replay in self._scoring_replays.values()))

    @property
    def replay_telemetry(self) -> Telemetry:
        """Counters of the replayed scoring and matching, summed."""
        return merge_telemetry(self.scoring_telemetry, self.metric.matching_telemetry)

    def reset(self) -> None:
        """Forget everything accumulated (start of a validation epoch)."""
        self.metric.reset()
        self._waiting = None

    @torch.no_grad()
    def update(self, outputs: dict[str, Tensor], batch: Batch) -> None:
        """Add one batch: raw eval-mode outputs and the batch they came from.

        ``outputs`` are read during the call only: they may be a replayed forward's static
        outputs, which the next batch's forward rewrites (what a waiting mask batch keeps of
        them is copied).

        The batch is decoded and scored as one padded batch, not image by image
        (:meth:`MeanAveragePrecision.score_batch`). No host synchronisation. What can be done
        without the host is one function of the outputs and the batch's tensors
        (:meth:`_score`), replayed from a CUDA graph with ``replay_scoring``: the whole scoring
        of boxes, keypoints and rotated boxes; for masks the decoding and source pixels. Masks
        are built at each image's source size, which the host must know: a mask task starts
        copying the batch's sizes to the host and scores the batch at the next ``update`` (or
        at ``compute``), when the copy has long finished.
        """
        device = batch["images"].device
        with torch.autocast(device.type, enabled=False):
            scored = self._scoring(device)(self._scoring_inputs(outputs, batch))
            if "mask" not in TASK_KINDS[self.task]:
                self.metric.add_scored(ScoredBatch.from_tensors(scored), batch["image_ids"])
                return
            waiting = _WaitingForSizes(
                predictions=from_flat_tensors(BatchPredictions, scored, _PREDICTIONS),
                targets=from_flat_tensors(BatchTargets, scored, _TARGETS),
                mask_coef=scored["mask_coef"],
                protos=_own(scored["protos"], outputs),
                batch=batch,
                sizes=HostCopy(scored["sizes"]),
                pairing=HostCopy(scored["pairing"]),
            )
            self._score_waiting()
            self._waiting = waiting

    def _score_waiting(self) -> None:
        """Score the mask batch left waiting for its sizes by the last ``update``, if any."""
        if self._waiting is None:
            return
        waiting, self._waiting = self._waiting, None
        batch = waiting.batch
        with torch.autocast(batch["images"].device.type, enabled=False):
            sizes = SourceSizes.unpack(waiting.sizes.read())
            pairing = waiting.pairing.read()  # (B, k) bool on the host
            predictions, protos = waiting.predictions, waiting.protos
            boxes = predictions.boxes
            assert boxes is not None  # every task's predictions have boxes
            device = boxes.device
            # made before the metric's scratch, since their tables are kept across batches;
            # none for an image whose rows cannot pair (it gets no masks)
            grids = [
                resample_grid(
                    (sizes.heights[i], sizes.widths[i]),
                    protos[i],
                    scale=sizes.scale_pad[i][0],
                    pad=sizes.scale_pad[i][1:],
                    centre_dtype=boxes.dtype,
                )
                if bool(pairing[i].any())
                else None
                for i in range(len(sizes.heights))
            ]

            # only the rows that can pair with a target get masks (above the confidence cut,
            # of a class some target of the image has): the others' masks would never be read.
            # The metric builds each image's masks when it reaches the image, so one image's
            # masks are alive at a time.
            def prediction_masks(i: int) -> tuple[Tensor, Tensor]:
                rows = _to_device(torch.nonzero(pairing[i]).squeeze(1), device)
                scale, pad_x, pad_y = sizes.scale_pad[i]
                masks = resample_masks(
                    waiting.mask_coef[i][rows],
                    protos[i],
                    boxes[i][rows],
                    (sizes.heights[i], sizes.widths[i]),
                    scale=scale,
                    pad=(pad_x, pad_y),
                    grid=grids[i],
                )
                return masks, rows

            def target_masks(i: int) -> tuple[Tensor, Tensor]:
                masks = self._target_masks(batch, i, sizes)
                return masks, torch.arange(masks.shape[0], device=device)

            self.metric.update_batch(
                replace(predictions, masks=prediction_masks),
                replace(waiting.targets, masks=target_masks),
                image_ids=batch["image_ids"],
            )

    def compute(self) -> dict[str, float]:
        """``{"<kind>/<stat>": value}`` plus ``"fitness"`` (the task's primary mAP50-95).

        Under a distributed run every rank must call it (it gathers the images every rank
        evaluated, :func:`~lucid_yolo.train.metrics.gather_across_ranks`), and every rank gets
        the metrics of the whole set.
        """
        self._score_waiting()
        metrics = gather_across_ranks(self.metric).compute()
        metrics["fitness"] = metrics[f"{FITNESS_KIND[self.task]}/mAP50-95"]
        return metrics

    @torch.no_grad()
    def predictions(self, outputs: dict[str, Tensor], batch: Batch) -> list[dict[str, Tensor]]:
        """Per image, the decoded predictions in source pixels as a dict of CPU tensors."""
        result = []
        for i, detections in enumerate(self.decode(outputs, batch)):
            record = self.image_predictions(detections, batch, i)
            columns = {
                "boxes": record.boxes,
                "scores": record.scores,
                "classes": record.classes,
                "masks": record.masks,
                "keypoints": record.keypoints,
                "rboxes": record.rboxes,
            }
            entry = {k: v.cpu() for k, v in columns.items() if v is not None}
            entry["image_id"] = batch["image_ids"][i].cpu()
            result.append(entry)
        return result

    def decode(self, outputs: dict[str, Tensor], batch: Batch) -> list[Detections]:
        """Per image, the deployed path's detections in input pixels (masks as coefficients)."""
        height, width = batch["images"].shape[-2:]
        float_outputs = {k: v.float() for k, v in outputs.items()}
        return decode_end2end(
            float_outputs,
            (height, width),
            conf_threshold=self.conf,
            max_det=self.max_det,
            strides=self.strides,
            assemble_masks_at_input=False,
        )

    def image_predictions(self, detections: Detections, batch: Batch, i: int) -> ImagePredictions:
        """Image ``i``'s decoded detections in source pixels (prediction, not the metric's path).

        Masks need the source size on the host, read here (a host synchronisation).
        """
        scale_pad = batch["scale_pad"][i].to(detections.boxes)
        boxes = _source_boxes(detections.boxes, scale_pad, batch["orig_sizes"][i])
        masks = None
        if detections.mask_coef is not None and detections.protos is not None:
            sizes = SourceSizes.read(batch)
            height, width = sizes.heights[i], sizes.widths[i]
            scale, pad_x, pad_y = sizes.scale_pad[i]
            masks = resample_masks(
                detections.mask_coef,
                detections.protos,
                boxes,
                (height, width),
                scale=scale,
                pad=(pad_x, pad_y),
            )
        return ImagePredictions(
            scores=detections.scores,
            classes=detections.classes,
            boxes=boxes,
            masks=masks,
            keypoints=None
            if detections.keypoints is None
            else _source_keypoints(detections.keypoints, scale_pad),
            rboxes=None
            if detections.rboxes is None
            else unletterbox_rboxes(detections.rboxes, scale_pad),
        )

    def targets(self, batch: Batch, i: int, sizes: SourceSizes | None = None) -> ImageTargets:
        """Image ``i``'s ground truth in source pixels, as the metric scores it.

        Only the image's real instances: their count comes from ``sizes`` when given, else it
        is read here (a host synchronisation). Instances the batch flags ``ignore`` are left out
        of recall and matched predictions count neither way: for rotated boxes they are DOTA
        ``difficult`` (IoU), for every other task COCO crowds (``iscrowd``: intersection over
        the prediction's area).

        Raises:
            MetricsInputError: a segment batch without ``source_shapes``, or with another
                number of shapes than valid instances.
            RleError: an RLE of another size than its image.
        """
        sizes = SourceSizes.read(batch) if sizes is None else sizes
        padded = self._source_targets(batch).image(i)
        count = sizes.counts[i]  # real instances come first (the batch's padding is at the end)
        masks = self._target_masks(batch, i, sizes) if "mask" in TASK_KINDS[self.task] else None
        return replace(
            padded,
            masks=masks,
            valid=None,
            **{
                f.name: getattr(padded, f.name)[:count]
                for f in fields(padded)
                if f.name not in ("valid", "masks") and getattr(padded, f.name) is not None
            },
        )

    def _scoring(self, device: torch.device) -> Scoring:
        """How to score a batch on ``device``: replayed there, or eagerly."""
        if not (self.replay_scoring and device.type == "cuda"):
            return self._score
        if device not in self._scoring_replays:
            self._scoring_replays[device] = ScoringReplay(self._score, device)
        return self._scoring_replays[device]

    def _scoring_inputs(
        self, outputs: Mapping[str, Tensor], batch: Batch
    ) -> dict[str, ScoringValue]:
        """What :meth:`_score` reads: the input size, the confidence cut and top-k, the outputs
        of the one-to-one branch (the only one decoded) and the prototypes, and the batch's
        target fields."""
        height, width = batch["images"].shape[-2:]
        inputs: dict[str, ScoringValue] = {
            "height": int(height),
            "width": int(width),
            "conf": float(self.conf),
            "max_det": int(self.max_det),
        }
        branch = f"{O2O}."
        decoded = {k: v for k, v in outputs.items() if k.startswith(branch) or k == PROTOS}
        inputs.update({_OUTPUT + k: v for k, v in decoded.items()})
        fields = cast(Mapping[str, Tensor], batch)
        inputs.update({k: fields[k] for k in _SCORED_FIELDS if k in fields})
        return inputs

    def _score(self, inputs: Mapping[str, ScoringValue]) -> dict[str, Tensor]:
        """What a batch's evaluation does without the host (:meth:`_scoring_inputs`' names):
        the top-k and source pixels, then for boxes, keypoints and rotated boxes
        :meth:`MeanAveragePrecision.score_batch`, flattened (:meth:`ScoredBatch.as_tensors`);
        for masks, whose scoring needs each image's size on the host, the predictions and
        targets (under ``predictions/`` and ``targets/``), the coefficients, the prototypes,
        the batch's :meth:`SourceSizes.pack` and the rows that can pair.

        Pure and free of host reads off the CPU, so a CUDA graph can hold it; the scalars it
        reads (input size, confidence cut, top-k) are inputs, so that a graph is keyed by them.
        What else it reads is fixed at construction and held by a graph as it was recorded:
        the strides, the task and the metric's kinds, ``max_dets`` and sigmas.
        """
        tensors = {k: v for k, v in inputs.items() if isinstance(v, Tensor)}
        outputs = {k.removeprefix(_OUTPUT): v for k, v in tensors.items() if k.startswith(_OUTPUT)}
        fields = cast(Batch, {k: v for k, v in tensors.items() if not k.startswith(_OUTPUT)})
        size = (int(inputs["height"]), int(inputs["width"]))
        top = self._top_k(outputs, size, float(inputs["conf"]), int(inputs["max_det"]))
        predictions = self._source_predictions(top, fields)
        targets = self._source_targets(fields)
        if "mask" not in TASK_KINDS[self.task]:
            return self.metric.score_batch(predictions, targets).as_tensors()
        return {
            **flat_tensors(predictions, _PREDICTIONS),
            **flat_tensors(targets, _TARGETS),
            "mask_coef": top["mask_coef"],
            "protos": top["protos"],
            "sizes": SourceSizes.pack(fields),
            "pairing": _rows_that_can_pair(predictions, targets),
        }

    def _top_k(
        self, outputs: Mapping[str, Tensor], image_size: Sequence[int], conf: float, max_det: int
    ) -> dict[str, Tensor]:
        """The deployed path's top-k of the whole batch in input pixels, static shapes.

        ``boxes`` (B, k, 4), ``scores`` (B, k) best first, ``classes`` (B, k), ``valid``
        (B, k) the rows at or above the confidence cut (a prefix of each image's rows), and
        the task's fields: ``mask_coef`` (B, k, M) with ``protos`` (B, M, H/4, W/4),
        ``keypoints`` (B, k, K, 3), ``rboxes`` (B, k, 5).
        """
        height, width = image_size
        float_outputs = {k: v.float() for k, v in outputs.items()}
        dense = decode_dense(float_outputs, (height, width), branch=O2O, strides=self.strides)
        top = topk_dense(dense, max_det, masks=False, conf_threshold=conf)
        if dense.protos is not None:
            top["protos"] = dense.protos
        return top

    def _source_predictions(self, top: dict[str, Tensor], batch: Batch) -> BatchPredictions:
        """:meth:`_top_k`'s rows in source pixels, masks left to the caller."""
        scale_pad = batch["scale_pad"].to(top["boxes"])
        return BatchPredictions(
            scores=top["scores"],
            classes=top["classes"],
            valid=top["valid"],
            boxes=_source_boxes(top["boxes"], scale_pad, batch["orig_sizes"]),
            keypoints=_source_keypoints(top["keypoints"], scale_pad)
            if "keypoints" in top
            else None,
            rboxes=unletterbox_rboxes(top["rboxes"], scale_pad) if "rboxes" in top else None,
        )

    def _source_targets(self, batch: Batch) -> BatchTargets:
        """Every target row of the batch in source pixels but masks; padding flagged ``valid``."""
        scale_pad = batch["scale_pad"].to(batch["boxes"])
        keypoints = rboxes = None
        if "keypoints" in batch and self.task == "pose":
            keypoints = _source_keypoints(batch["keypoints"], scale_pad)
        if "rboxes" in batch and self.task == "obb":
            rboxes = unletterbox_rboxes(batch["rboxes"], scale_pad)
        ignore = batch.get("ignore")
        return BatchTargets(
            classes=batch["classes"],
            valid=batch["valid"],
            boxes=_source_boxes(batch["boxes"], scale_pad, batch["orig_sizes"]),
            keypoints=keypoints,
            rboxes=rboxes,
            iscrowd=None if self.task == "obb" else ignore,
            difficult=ignore if self.task == "obb" else None,
        )

    def _target_masks(self, batch: Batch, i: int, sizes: SourceSizes) -> Tensor:
        """(count, H, W) bool on the batch's device: image ``i``'s real instances at source size.

        Raises:
            MetricsInputError: a batch without ``source_shapes``, or with another number of
                shapes than valid instances.
        """
        device = batch["boxes"].device
        shapes = _source_shapes(batch, i, sizes.counts[i])
        # pinned for a GPU: from pinned memory the copy is queued, not waited for
        masks = self._source_masks.masks(
            shapes, sizes.heights[i], sizes.widths[i], pinned=device.type == "cuda"
        )
        return masks.to(device, non_blocking=True) if device.type == "cuda" else masks


@dataclass(frozen=True)
class SourceSizes:
    """A batch's source-image geometry and instance counts on the host, read in one transfer.

    Attributes:
        heights: per image, source rows.
        widths: per image, source columns.
        scale_pad: per image, ``(scale, pad_x, pad_y)`` of its letterbox.
        counts: per image, real instances (the first rows of its targets).
    """

    heights: list[int]
    widths: list[int]
    scale_pad: list[tuple[float, float, float]]
    counts: list[int]

    @classmethod
    def read(cls, batch: Batch) -> SourceSizes:
        """Read the batch's sizes, letterboxes and counts now (one host synchronisation)."""
        return cls.unpack(cls.pack(batch).cpu())

    @staticmethod
    def pack(batch: Batch) -> Tensor:
        """(B, 6) float64 on the batch's device: what :meth:`unpack` reads, no sync."""
        columns = [
            batch["orig_sizes"].to(torch.float64),  # int64 and float32 are exact in float64
            batch["scale_pad"].to(torch.float64),
            batch["valid"].sum(dim=1, keepdim=True).to(torch.float64),
        ]
        return torch.cat(columns, dim=1)

    @classmethod
    def unpack(cls, packed: Tensor) -> SourceSizes:
        """The sizes from a host copy of :meth:`pack`'s tensor."""
        rows = packed.tolist()
        return cls(
            heights=[int(row[0]) for row in rows],
            widths=[int(row[1]) for row in rows],
            scale_pad=[(row[2], row[3], row[4]) for row in rows],
            counts=[int(row[5]) for row in rows],
        )


@dataclass(frozen=True)
class _WaitingForSizes:
    """A mask batch decoded by ``update``, scored once its sizes have reached the host.

    Attributes:
        predictions: the batch's predictions in source pixels, no masks yet.
        targets: its targets in source pixels, no masks yet.
        mask_coef: (B, k, M) the predictions' coefficients.
        protos: (B, M, H/4, W/4) the images' prototypes.
        batch: the batch.
        sizes: :meth:`SourceSizes.pack` of the batch, on its way to the host.
        pairing: (B, k) bool, the prediction rows that can pair (:func:`_rows_that_can_pair`),
            on its way to the host.
    """

    predictions: BatchPredictions
    targets: BatchTargets
    mask_coef: Tensor
    protos: Tensor
    batch: Batch
    sizes: HostCopy
    pairing: HostCopy


_OUTPUT = "output/"
"""Prefix of the network's outputs among the scoring's inputs (the batch's fields have none)."""

_PREDICTIONS = "predictions/"
_TARGETS = "targets/"
"""Prefixes of a mask batch's predictions and targets among the scoring's outputs."""

_SCORED_FIELDS = (
    "scale_pad",
    "orig_sizes",
    "classes",
    "valid",
    "boxes",
    "ignore",
    "keypoints",
    "rboxes",
)
"""The batch's tensors the scoring reads (:meth:`Evaluator._source_predictions` the letterbox
and source sizes, :meth:`Evaluator._source_targets` all of them)."""


def _own(tensor: Tensor, outputs: dict[str, Tensor]) -> Tensor:
    """``tensor``, copied when it shares memory with one of ``outputs`` (in float32 the
    prototypes are the forward's own tensor)."""
    address = tensor.untyped_storage().data_ptr()
    shared = any(o.untyped_storage().data_ptr() == address for o in outputs.values())
    return tensor.clone() if shared else tensor


def _rows_that_can_pair(predictions: BatchPredictions, targets: BatchTargets) -> Tensor:
    """(B, k) bool: predictions above the confidence cut of a class some real target has.

    Only these can be matched (other classes never compete), so only these need masks.
    """
    same_class = predictions.classes[:, :, None] == targets.classes[:, None, :]  # (B, k, G)
    target_valid = targets.valid.to(torch.bool)[:, None, :]
    return predictions.valid & (same_class & target_valid).any(dim=2)


def _to_device(rows: Tensor, device: torch.device) -> Tensor:
    """Host indices on ``device``; for a GPU through pinned memory, so the copy is queued."""
    if device.type != "cuda" or rows.numel() == 0:  # an empty tensor copies nothing
        return rows.to(device)
    return rows.pin_memory().to(device, non_blocking=True)


def _source_boxes(boxes: Tensor, scale_pad: Tensor, orig_size: Tensor) -> Tensor:
    """(..., N, 4) ``xyxy`` input pixels → source pixels, clipped to ``orig_size``.

    Args:
        boxes: (..., N, 4) ``xyxy`` input pixels.
        scale_pad: (..., 3) the letterbox of each image.
        orig_size: (..., 2) ``(height, width)`` of each source image.
    """
    source = unletterbox_boxes(boxes, scale_pad)
    width_height = orig_size.flip(-1)
    limits = torch.cat([width_height, width_height], dim=-1)[..., None, :].to(source)  # (..., 1, 4)
    return torch.minimum(source.clamp_min(0.0), limits)


def _source_keypoints(keypoints: Tensor, scale_pad: Tensor) -> Tensor:
    """(..., N, K, 3) with ``xy`` input pixels → ``xy`` source pixels, third column unchanged.

    Args:
        keypoints: (..., N, K, 3) input pixels.
        scale_pad: (..., 3) the letterbox of each image.
    """
    per_row = scale_pad[..., None, :].expand(*keypoints.shape[:-2], 3)  # (..., N, 3)
    xy = unletterbox_points(keypoints[..., :2], per_row)
    return torch.cat((xy, keypoints[..., 2:]), dim=-1)


def _source_shapes(batch: Batch, i: int, count: int) -> list[SourceShape]:
    """Image ``i``'s ground truth in source pixels: one polygon or RLE per real instance."""
    if "source_shapes" not in batch:
        raise MetricsInputError(
            "mask metrics read batch['source_shapes'] (each valid instance's polygon or RLE in "
            "source pixels), which this batch lacks: build it with YoloDataset(augment=None) and "
            "collate"
        )
    shapes = batch["source_shapes"][i]
    if len(shapes) != count:
        raise MetricsInputError(
            f"image {i} of the batch has {len(shapes)!r} source shapes but {count!r} valid "
            "instances: the evaluation dataset must keep every instance (no max_instances cut)"
        )
    return shapes


__all__ = ["FITNESS_KIND", "TASK_KINDS", "Evaluator", "SourceSizes"]
