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

Images are evaluated one at a time, so the largest mask stack alive is one image's
``max_det × H × W`` bytes of predictions plus its targets.

Validation at GPU speed (issue 11): ``update`` keeps every shape static (each image's ``max_det``
top-k rows with a ``valid`` flag for the confidence cut, the batch's padded target rows with its
``valid`` mask), so that neither it nor the metric waits for the device. Masks need each
image's source size on the host (their buffers are allocated at that size): a mask batch starts
copying its sizes, instance counts and detection counts to the host and is scored one
``update`` later, when the copy has long finished (:class:`~lucid_yolo.train.host_copy.HostCopy`);
with the counts, segment targets are cut to the real instances. It runs
with autocast off, so a bf16 validation step decodes and builds masks in float32 as ``predict``
and a CPU run do (under autocast their matrix products would round to bf16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from lucid_yolo.models.decode import Detections, decode_end2end, resample_masks
from lucid_yolo.train.data.augment.letterbox import unletterbox_boxes, unletterbox_points
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.geometry import SourceShape
from lucid_yolo.train.host_copy import HostCopy
from lucid_yolo.train.metrics import (
    ImagePredictions,
    ImageTargets,
    MeanAveragePrecision,
    MetricsInputError,
    gather_across_ranks,
)
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
    ) -> None:
        if task not in TASK_KINDS:
            raise TrainConfigError(f"unknown task {task!r}: expected one of {sorted(TASK_KINDS)!r}")
        self.task = task
        self.strides = tuple(strides)
        self.conf = conf
        self.max_det = max_det
        self.metric = MeanAveragePrecision(kinds=TASK_KINDS[task])
        self._waiting: _WaitingForSizes | None = None
        self._source_masks = SourceMaskCache()  # kept across passes: the set does not change

    def reset(self) -> None:
        """Forget everything accumulated (start of a validation epoch)."""
        self.metric.reset()
        self._waiting = None

    @torch.no_grad()
    def update(self, outputs: dict[str, Tensor], batch: Batch) -> None:
        """Add one batch: raw eval-mode outputs and the batch they came from.

        No host synchronisation. Masks are built at each image's source size, which the host
        must know: a mask task starts copying the batch's sizes to the host and scores the
        batch at the next ``update`` (or at ``compute``), when the copy has long finished.
        """
        with torch.autocast(batch["images"].device.type, enabled=False):
            images = self.decode(outputs, batch, keep_shape=True)
            if "mask" not in TASK_KINDS[self.task]:
                self.metric.update(
                    (self.image_predictions(d, batch, i) for i, d in enumerate(images)),
                    (self._padded_targets(batch, i) for i in range(len(images))),
                    image_ids=batch["image_ids"],
                )
                return
            waiting = _WaitingForSizes(images, batch, HostCopy(SourceSizes.pack(batch, images)))
            self._score_waiting()
            self._waiting = waiting

    def _score_waiting(self) -> None:
        """Score the mask batch left waiting for its sizes by the last ``update``, if any."""
        if self._waiting is None:
            return
        images, batch, copy = self._waiting.images, self._waiting.batch, self._waiting.sizes
        self._waiting = None
        with torch.autocast(batch["images"].device.type, enabled=False):
            sizes = SourceSizes.unpack(copy.read(), with_detections=True)
            # the sizes also say how many rows pass the confidence cut (a prefix, best first),
            # so only those are resampled to the source size, and the targets are cut to the
            # real instances. Generators: each image's records (dense masks at source size) are
            # built when the metric reads them, so one image's masks are alive at a time
            images = [_first_rows(d, n) for d, n in zip(images, sizes.detections, strict=True)]
            self.metric.update(
                (self.image_predictions(d, batch, i, sizes) for i, d in enumerate(images)),
                (self.targets(batch, i, sizes) for i in range(len(images))),
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
            fields = {
                "boxes": record.boxes,
                "scores": record.scores,
                "classes": record.classes,
                "masks": record.masks,
                "keypoints": record.keypoints,
                "rboxes": record.rboxes,
            }
            entry = {k: v.cpu() for k, v in fields.items() if v is not None}
            entry["image_id"] = batch["image_ids"][i].cpu()
            result.append(entry)
        return result

    def decode(
        self, outputs: dict[str, Tensor], batch: Batch, *, keep_shape: bool = False
    ) -> list[Detections]:
        """Per image, the deployed path's detections in input pixels (masks as coefficients).

        ``keep_shape`` keeps all ``max_det`` rows and flags the confidence cut in
        ``Detections.valid`` (:func:`~lucid_yolo.models.decode.decode_end2end`).
        """
        height, width = batch["images"].shape[-2:]
        float_outputs = {k: v.float() for k, v in outputs.items()}
        return decode_end2end(
            float_outputs,
            (height, width),
            conf_threshold=self.conf,
            max_det=self.max_det,
            strides=self.strides,
            assemble_masks_at_input=False,
            keep_shape=keep_shape,
        )

    def image_predictions(
        self, detections: Detections, batch: Batch, i: int, sizes: SourceSizes | None = None
    ) -> ImagePredictions:
        """Image ``i``'s decoded detections in source pixels, as the metric scores them.

        Masks need the source size on the host: from ``sizes`` when given, else read here.
        """
        scale_pad = batch["scale_pad"][i].to(detections.boxes)
        boxes = _source_boxes(detections.boxes, scale_pad, batch["orig_sizes"][i])
        masks = None
        if detections.mask_coef is not None and detections.protos is not None:
            sizes = SourceSizes.read(batch) if sizes is None else sizes
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
            else _source_rboxes(detections.rboxes, scale_pad),
            valid=detections.valid,
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
        padded = self._padded_targets(batch, i)
        count = sizes.counts[i]  # real instances come first (the batch's padding is at the end)
        masks = None
        if "mask" in TASK_KINDS[self.task]:
            height, width = sizes.heights[i], sizes.widths[i]
            device = batch["boxes"].device
            # pinned for a GPU: from pinned memory the copy is queued, not waited for
            shapes = _source_shapes(batch, i, count)
            masks = self._source_masks.masks(shapes, height, width, pinned=device.type == "cuda")
            if device.type == "cuda":
                masks = masks.to(device, non_blocking=True)
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

    def _padded_targets(self, batch: Batch, i: int) -> ImageTargets:
        """All of image ``i``'s target rows but masks, padding flagged in ``valid``.

        What :meth:`update` scores when no count is on the host; :meth:`targets` cuts it.
        """
        valid = batch["valid"][i]
        scale_pad = batch["scale_pad"][i].to(batch["boxes"])
        keypoints = rboxes = None
        if "keypoints" in batch and self.task == "pose":
            keypoints = _source_keypoints(batch["keypoints"][i], scale_pad)
        if "rboxes" in batch and self.task == "obb":
            rboxes = _source_rboxes(batch["rboxes"][i], scale_pad)
        ignore = batch["ignore"][i] if "ignore" in batch else None
        return ImageTargets(
            classes=batch["classes"][i],
            boxes=_source_boxes(batch["boxes"][i], scale_pad, batch["orig_sizes"][i]),
            keypoints=keypoints,
            rboxes=rboxes,
            iscrowd=None if self.task == "obb" else ignore,
            difficult=ignore if self.task == "obb" else None,
            valid=valid,
        )


@dataclass(frozen=True)
class SourceSizes:
    """A batch's source-image geometry and instance counts on the host, read in one transfer.

    Attributes:
        heights: per image, source rows.
        widths: per image, source columns.
        scale_pad: per image, ``(scale, pad_x, pad_y)`` of its letterbox.
        counts: per image, real instances (the first rows of its targets).
        detections: per image, the decoded rows flagged ``valid`` (the first rows of a
            ``keep_shape`` decode, which is sorted by score); empty when not asked for.
    """

    heights: list[int]
    widths: list[int]
    scale_pad: list[tuple[float, float, float]]
    counts: list[int]
    detections: list[int]

    @classmethod
    def read(cls, batch: Batch) -> SourceSizes:
        """Read the batch's sizes, letterboxes and counts now (one host synchronisation)."""
        return cls.unpack(cls.pack(batch).cpu(), with_detections=False)

    @staticmethod
    def pack(batch: Batch, detections: Sequence[Detections] = ()) -> Tensor:
        """(B, 6 or 7) float64 on the batch's device: what :meth:`unpack` reads, no sync.

        Args:
            batch: the batch.
            detections: a ``keep_shape`` decode of the batch, whose valid rows to count too.
        """
        columns = [
            batch["orig_sizes"].to(torch.float64),  # int64 and float32 are exact in float64
            batch["scale_pad"].to(torch.float64),
            batch["valid"].sum(dim=1, keepdim=True).to(torch.float64),
        ]
        if detections:
            valid = torch.stack([_valid_rows(d) for d in detections])  # (B, k)
            columns.append(valid.sum(dim=1, keepdim=True).to(torch.float64))
        return torch.cat(columns, dim=1)

    @classmethod
    def unpack(cls, packed: Tensor, *, with_detections: bool) -> SourceSizes:
        """The sizes from a host copy of :meth:`pack`'s tensor."""
        rows = packed.tolist()
        return cls(
            heights=[int(row[0]) for row in rows],
            widths=[int(row[1]) for row in rows],
            scale_pad=[(row[2], row[3], row[4]) for row in rows],
            counts=[int(row[5]) for row in rows],
            detections=[int(row[6]) for row in rows] if with_detections else [],
        )


@dataclass(frozen=True)
class _WaitingForSizes:
    """A mask batch decoded by ``update``, scored once its sizes have reached the host."""

    images: list[Detections]
    batch: Batch
    sizes: HostCopy


def _valid_rows(detections: Detections) -> Tensor:
    if detections.valid is None:
        return torch.ones_like(detections.scores, dtype=torch.bool)
    return detections.valid


def _first_rows(detections: Detections, count: int) -> Detections:
    """The first ``count`` rows of every per-row field (the prototypes are per image)."""
    return replace(
        detections,
        **{
            f.name: getattr(detections, f.name)[:count]
            for f in fields(detections)
            if f.name != "protos" and getattr(detections, f.name) is not None
        },
    )


def _source_boxes(boxes: Tensor, scale_pad: Tensor, orig_size: Tensor) -> Tensor:
    """(N, 4) ``xyxy`` input pixels → source pixels, clipped to ``orig_size`` (height, width)."""
    source = unletterbox_boxes(boxes[None], scale_pad[None])[0]
    limits = orig_size.flip(0).repeat(2).to(source)  # (width, height, width, height)
    return torch.minimum(source.clamp_min(0.0), limits)


def _source_keypoints(keypoints: Tensor, scale_pad: Tensor) -> Tensor:
    """(N, K, 3) with ``xy`` input pixels → ``xy`` source pixels, third column unchanged."""
    if keypoints.shape[0] == 0:
        return keypoints
    xy = unletterbox_points(keypoints[..., :2], scale_pad[None].expand(keypoints.shape[0], 3))
    return torch.cat((xy, keypoints[..., 2:]), dim=-1)


def _source_rboxes(rboxes: Tensor, scale_pad: Tensor) -> Tensor:
    """(N, 5) ``xywhr`` input pixels → source pixels (the angle is unchanged by letterbox)."""
    centre = unletterbox_points(rboxes[None, :, :2], scale_pad[None])[0]
    size = rboxes[:, 2:4] / scale_pad[0]
    return torch.cat((centre, size, rboxes[:, 4:]), dim=-1)


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
