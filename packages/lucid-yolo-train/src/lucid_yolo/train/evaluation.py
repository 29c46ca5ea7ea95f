"""From raw validation outputs to COCO-style metrics in source-image pixels.

Predictions are decoded on the deployed path (one-to-one branch, top-k, no NMS), then mapped back
through the letterbox to the pixels of the source image, where the ground truth is defined; the
targets of the padded batch take the same way back. Each task evaluates its own kinds and names
one of them its fitness (the checkpoint monitor): box for detect, mask for segment, pose for pose,
obb for obb.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_yolo.models.decode import Detections, decode_end2end
from lucid_yolo.train.data.augment.letterbox import unletterbox_boxes, unletterbox_points
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.metrics import ImagePredictions, ImageTargets, MeanAveragePrecision

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
        detections = self._decode(outputs, batch)
        predictions = [self._predictions(d, batch, i) for i, d in enumerate(detections)]
        targets = [self.targets(batch, i) for i in range(len(detections))]
        self.metric.update(predictions, targets)

    def compute(self) -> dict[str, float]:
        """``{"<kind>/<stat>": value}`` plus ``"fitness"`` (the task's primary mAP50-95)."""
        metrics = self.metric.compute()
        metrics["fitness"] = metrics[f"{FITNESS_KIND[self.task]}/mAP50-95"]
        return metrics

    @torch.no_grad()
    def predictions(self, outputs: dict[str, Tensor], batch: Batch) -> list[dict[str, Tensor]]:
        """Per image, the decoded predictions in source pixels as a dict of CPU tensors."""
        result = []
        for i, detections in enumerate(self._decode(outputs, batch)):
            record = self._predictions(detections, batch, i)
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

    def _decode(self, outputs: dict[str, Tensor], batch: Batch) -> list[Detections]:
        height, width = batch["images"].shape[-2:]
        float_outputs = {k: v.float() for k, v in outputs.items()}
        return decode_end2end(
            float_outputs,
            (height, width),
            conf_threshold=self.conf,
            max_det=self.max_det,
            strides=self.strides,
        )

    def _predictions(self, detections: Detections, batch: Batch, i: int) -> ImagePredictions:
        scale_pad = batch["scale_pad"][i].to(detections.boxes)
        height, width = (int(v) for v in batch["orig_sizes"][i])
        return ImagePredictions(
            scores=detections.scores,
            classes=detections.classes,
            boxes=_source_boxes(detections.boxes, scale_pad, height, width),
            masks=None
            if detections.masks is None
            else _source_masks(detections.masks, scale_pad, height, width),
            keypoints=None
            if detections.keypoints is None
            else _source_keypoints(detections.keypoints, scale_pad),
            rboxes=None
            if detections.rboxes is None
            else _source_rboxes(detections.rboxes, scale_pad),
        )

    def targets(self, batch: Batch, i: int) -> ImageTargets:
        """Image ``i``'s ground truth in source pixels, as the metric scores it.

        Instances the batch flags ``ignore`` (DOTA difficult, COCO crowds kept as "ignore")
        become ``difficult``: matched predictions count neither way, and they are left out of
        recall.
        """
        valid = batch["valid"][i]
        scale_pad = batch["scale_pad"][i].to(batch["boxes"])
        height, width = (int(v) for v in batch["orig_sizes"][i])
        masks = keypoints = rboxes = None
        if "masks" in batch and "mask" in TASK_KINDS[self.task]:
            input_size = batch["images"].shape[-2:]
            upsampled = F.interpolate(
                batch["masks"][i][valid][None].float(), size=tuple(input_size), mode="nearest"
            )[0]
            masks = _source_masks(upsampled > 0.5, scale_pad, height, width)
        if "keypoints" in batch and self.task == "pose":
            keypoints = _source_keypoints(batch["keypoints"][i][valid], scale_pad)
        if "rboxes" in batch and self.task == "obb":
            rboxes = _source_rboxes(batch["rboxes"][i][valid], scale_pad)
        return ImageTargets(
            classes=batch["classes"][i][valid],
            boxes=_source_boxes(batch["boxes"][i][valid], scale_pad, height, width),
            masks=masks,
            keypoints=keypoints,
            rboxes=rboxes,
            difficult=batch["ignore"][i][valid] if "ignore" in batch else None,
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


def _source_masks(masks: Tensor, scale_pad: Tensor, height: int, width: int) -> Tensor:
    """(N, H_in, W_in) bool input-resolution masks → (N, height, width) bool source masks."""
    if masks.shape[0] == 0:
        return torch.zeros((0, height, width), dtype=torch.bool, device=masks.device)
    scale, pad_x, pad_y = (float(v) for v in scale_pad)
    top, left = round(pad_y), round(pad_x)
    bottom = min(masks.shape[-2], top + max(round(height * scale), 1))
    right = min(masks.shape[-1], left + max(round(width * scale), 1))
    cropped = masks[:, top:bottom, left:right].float()
    resized = F.interpolate(
        cropped[None], size=(height, width), mode="bilinear", align_corners=False
    )
    return resized[0] > 0.5


__all__ = ["FITNESS_KIND", "TASK_KINDS", "Evaluator"]
