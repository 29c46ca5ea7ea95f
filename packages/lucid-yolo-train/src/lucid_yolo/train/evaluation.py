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
  (:func:`~lucid_yolo.train.geometry.source_masks`);
* predictions: each instance's prototype logits are sampled straight at the source pixels'
  centres (the letterbox padding cropped and the image resized in one bilinear step), then
  thresholded at probability 0.5, then cropped to the box in source pixels
  (:func:`~lucid_yolo.models.decode.resample_masks`);
* crowds: instances the batch flags ``ignore`` are COCO crowds for boxes, masks and keypoints
  (scored by intersection over the prediction's area) and DOTA difficult instances for rotated
  boxes (scored by IoU), the only two formats that set the flag.

Images are evaluated one at a time, so the largest mask stack alive is one image's
``max_det × H × W`` bytes of predictions plus its targets.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lucid_yolo.models.decode import Detections, decode_end2end, resample_masks
from lucid_yolo.train.data.augment.letterbox import unletterbox_boxes, unletterbox_points
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.geometry import source_masks
from lucid_yolo.train.metrics import (
    ImagePredictions,
    ImageTargets,
    MeanAveragePrecision,
    MetricsInputError,
    gather_across_ranks,
)

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

    def reset(self) -> None:
        """Forget everything accumulated (start of a validation epoch)."""
        self.metric.reset()

    @torch.no_grad()
    def update(self, outputs: dict[str, Tensor], batch: Batch) -> None:
        """Add one batch: raw eval-mode outputs and the batch they came from."""
        images = self.decode(outputs, batch)
        # generators: each image's records (dense masks at source size) are built when the
        # metric reads them, so one image's masks are alive at a time
        self.metric.update(
            (self.image_predictions(d, batch, i) for i, d in enumerate(images)),
            (self.targets(batch, i) for i in range(len(images))),
            image_ids=batch["image_ids"].tolist(),
        )

    def compute(self) -> dict[str, float]:
        """``{"<kind>/<stat>": value}`` plus ``"fitness"`` (the task's primary mAP50-95).

        Under a distributed run every rank must call it (it gathers the images every rank
        evaluated, :func:`~lucid_yolo.train.metrics.gather_across_ranks`), and every rank gets
        the metrics of the whole set.
        """
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
        """Image ``i``'s decoded detections in source pixels, as the metric scores them."""
        scale_pad = batch["scale_pad"][i].to(detections.boxes)
        height, width = (int(v) for v in batch["orig_sizes"][i])
        boxes = _source_boxes(detections.boxes, scale_pad, height, width)
        masks = None
        if detections.mask_coef is not None and detections.protos is not None:
            scale, pad_x, pad_y = (float(v) for v in scale_pad)
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
        )

    def targets(self, batch: Batch, i: int) -> ImageTargets:
        """Image ``i``'s ground truth in source pixels, as the metric scores it.

        Instances the batch flags ``ignore`` are left out of recall and matched predictions count
        neither way: for rotated boxes they are DOTA ``difficult`` (IoU), for every other task COCO
        crowds (``iscrowd``: intersection over the prediction's area).

        Raises:
            MetricsInputError: a segment batch without ``source_shapes``, or with another
                number of shapes than valid instances.
            RleError: an RLE of another size than its image.
        """
        valid = batch["valid"][i]
        scale_pad = batch["scale_pad"][i].to(batch["boxes"])
        height, width = (int(v) for v in batch["orig_sizes"][i])
        masks = keypoints = rboxes = None
        if "mask" in TASK_KINDS[self.task]:
            masks = _source_target_masks(batch, i, int(valid.sum()), height, width)
        if "keypoints" in batch and self.task == "pose":
            keypoints = _source_keypoints(batch["keypoints"][i][valid], scale_pad)
        if "rboxes" in batch and self.task == "obb":
            rboxes = _source_rboxes(batch["rboxes"][i][valid], scale_pad)
        ignore = batch["ignore"][i][valid] if "ignore" in batch else None
        return ImageTargets(
            classes=batch["classes"][i][valid],
            boxes=_source_boxes(batch["boxes"][i][valid], scale_pad, height, width),
            masks=masks,
            keypoints=keypoints,
            rboxes=rboxes,
            iscrowd=None if self.task == "obb" else ignore,
            difficult=ignore if self.task == "obb" else None,
        )


def _source_boxes(boxes: Tensor, scale_pad: Tensor, height: int, width: int) -> Tensor:
    """(N, 4) ``xyxy`` input pixels → source pixels, clipped to the source image."""
    source = unletterbox_boxes(boxes[None], scale_pad[None])[0]
    limits = torch.tensor([width, height, width, height], dtype=source.dtype, device=source.device)
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


def _source_target_masks(batch: Batch, i: int, count: int, height: int, width: int) -> Tensor:
    """(count, height, width) bool: image ``i``'s ground truth as masks at the source size."""
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
    return source_masks(shapes, height, width, device=batch["boxes"].device)


__all__ = ["FITNESS_KIND", "TASK_KINDS", "Evaluator"]
