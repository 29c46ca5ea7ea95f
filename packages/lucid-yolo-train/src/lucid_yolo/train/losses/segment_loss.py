"""Instance segmentation loss: prototype masks per positive anchor, plus a semantic auxiliary head.

Masks are predicted YOLACT-style (Bolya et al. 2019, §3): the net emits ``M`` prototype maps at
1/4 resolution and ``M`` coefficients per anchor; an instance mask is
``sigmoid(coefficients · prototypes)``. Its loss is the per-pixel BCE against the assigned
instance's mask, kept only inside the instance's box (so background far away does not dominate)
and divided by the box area (so large and small objects weigh the same).

Static shapes: assembling a mask for every anchor would cost ``A x H/4 x W/4`` per image, so the
loss takes a fixed number ``mask_samples`` of anchors per image, foreground first and, among
them, highest target score first. When an image has more positives than that (many instances),
the lowest-scored are left out of this term (they still train the box and class terms).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_yolo.models.outputs import MASK_COEF, PROTOS, SEMANTIC
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.losses.loss_base import BranchContext, YoloLoss

MaskNormalisation = Literal["instance", "pixels"]


def crop_weights(boxes: Tensor, height: int, width: int) -> Tensor:
    """Mask of the pixels whose centre lies inside each box.

    Args:
        boxes: (..., 4) ``xyxy`` in pixels of the map.
        height: map height.
        width: map width.

    Returns:
        (..., height, width) float 0/1.
    """
    xs = torch.arange(width, device=boxes.device, dtype=boxes.dtype) + 0.5
    ys = torch.arange(height, device=boxes.device, dtype=boxes.dtype) + 0.5
    inside_x = (xs >= boxes[..., 0, None]) & (xs <= boxes[..., 2, None])  # (..., W)
    inside_y = (ys >= boxes[..., 1, None]) & (ys <= boxes[..., 3, None])  # (..., H)
    return (inside_y[..., :, None] & inside_x[..., None, :]).to(boxes.dtype)


def instance_mask_loss(
    logits: Tensor,
    target: Tensor,
    boxes: Tensor,
    weight: Tensor,
    normalisation: MaskNormalisation = "instance",
) -> Tensor:
    """Box-cropped mask BCE, normalised per instance (default) or over all cropped pixels.

    Args:
        logits: (B, S, h, w) predicted mask logits.
        target: (B, S, h, w) 0/1 target masks.
        boxes: (B, S, 4) ``xyxy`` in pixels of the mask map.
        weight: (B, S) 1 for samples that count, 0 for padding.
        normalisation: ``"instance"``: each instance's BCE summed over its box and divided by
            the box area, then averaged over instances, so large and small objects weigh the
            same (YOLACT §3.2 / YOLOv8-seg); ``"pixels"``: summed over every counted instance's
            box and divided by the total box area, so each pixel weighs the same (an
            experiment of issue 13).

    Returns:
        () the normalised loss.
    """
    height, width = logits.shape[-2:]
    crop = crop_weights(boxes, height, width)
    area = ((boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])).clamp(min=1)
    bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    summed = (bce * crop).sum((-2, -1))  # (B, S)
    if normalisation == "pixels":
        return (summed * weight).sum() / (area * weight).sum().clamp(min=1)
    return (summed / area * weight).sum() / weight.sum().clamp(min=1)


def semantic_target(
    masks: Tensor, classes: Tensor, valid: Tensor, num_classes: int, size: tuple[int, int]
) -> Tensor:
    """Per-class semantic map built from the instance masks.

    A pixel belongs to class ``c`` when any valid instance of class ``c`` covers it. Masks are
    brought to ``size`` by max pooling, so thin objects survive the downsampling.

    Args:
        masks: (B, N, h, w) 0/1 instance masks.
        classes: (B, N) int64 classes (``-1`` on padding).
        valid: (B, N) bool.
        num_classes: ``C``.
        size: (H', W') of the semantic map.

    Returns:
        (B, C, H', W') float 0/1.
    """
    resized = F.adaptive_max_pool2d(masks.float(), size)  # (B, N, H', W')
    class_ids = torch.arange(num_classes, device=classes.device)
    one_hot = (classes[..., None] == class_ids) & valid[..., None]  # (B, N, C), no host check
    one_hot = one_hot.float()
    return torch.einsum("bnc,bnhw->bchw", one_hot, resized).clamp(max=1)


def semantic_loss(logits: Tensor, target: Tensor, smooth: float = 1.0) -> Tensor:
    """BCE plus Dice (Milletari et al. 2016) of a semantic map.

    BCE trains every pixel; Dice, computed per image and class, keeps rare classes from being
    drowned by background.

    Args:
        logits: (B, C, H, W) logits.
        target: (B, C, H, W) 0/1.
        smooth: added to both sides of the Dice ratio so empty classes score 1, not 0/0.

    Returns:
        () ``mean BCE + mean(1 - Dice)``.
    """
    bce = F.binary_cross_entropy_with_logits(logits, target)
    prob = logits.sigmoid()
    inter = (prob * target).sum((-2, -1))
    total = prob.sum((-2, -1)) + target.sum((-2, -1))
    dice = (2 * inter + smooth) / (total + smooth)
    return bce + (1 - dice).mean()


class SegmentationLoss(YoloLoss):
    """Detection terms plus ``mask`` (per branch) and ``semantic`` (shared).

    Args:
        num_classes: ``C``.
        mask_samples: positive anchors per image whose masks are assembled (static count).
        mask_normalisation: how the mask BCE is normalised (:func:`instance_mask_loss`).
        **kwargs: the arguments of :class:`~lucid_yolo.train.losses.loss_base.YoloLoss`.
    """

    task: ClassVar[str] = "segment"

    def __init__(
        self,
        num_classes: int,
        *,
        mask_samples: int = 256,
        mask_normalisation: MaskNormalisation = "instance",
        **kwargs: Any,
    ) -> None:
        super().__init__(num_classes, **kwargs)
        if mask_samples < 1:
            raise TrainConfigError(f"mask_samples={mask_samples!r}: sample at least one anchor")
        if mask_normalisation not in ("instance", "pixels"):
            raise TrainConfigError(
                f"mask_normalisation={mask_normalisation!r}: use 'instance' or 'pixels'"
            )
        self.mask_samples = mask_samples
        self.mask_normalisation: MaskNormalisation = mask_normalisation

    def _task_terms(self, ctx: BranchContext) -> dict[str, Tensor]:
        coef = ctx.output(MASK_COEF)  # (B, M, A)
        protos = ctx.outputs[PROTOS]  # (B, M, h, w)
        masks = ctx.batch["masks"]  # (B, N, h, w)
        B, M, A = coef.shape
        height, width = protos.shape[-2:]
        samples = min(self.mask_samples, A)
        priority = ctx.targets.fg * (1 + ctx.fg_weight)  # foreground first, then by score
        index = priority.topk(samples, dim=1).indices  # (B, S)
        weight = ctx.targets.fg.gather(1, index).float()
        sample_coef = coef.gather(2, index[:, None].expand(B, M, samples))  # (B, M, S)
        logits = torch.einsum("bms,bmhw->bshw", sample_coef, protos)
        gt_index = ctx.targets.gt_index.gather(1, index)
        target = masks.gather(1, gt_index[..., None, None].expand(B, samples, height, width))
        scale = ctx.batch["images"].shape[-1] / width
        boxes = ctx.targets.boxes.gather(1, index[..., None].expand(B, samples, 4)) / scale
        mask = instance_mask_loss(logits, target.float(), boxes, weight, self.mask_normalisation)
        return {"mask": mask}

    def _shared_terms(self, outputs: dict[str, Tensor], batch: Batch) -> dict[str, Tensor]:
        logits = outputs[SEMANTIC]
        target = semantic_target(
            batch["masks"],
            batch["classes"],
            batch["valid"],
            self.num_classes,
            (logits.shape[-2], logits.shape[-1]),
        )
        return {"semantic": semantic_loss(logits, target)}


__all__ = [
    "MaskNormalisation",
    "SegmentationLoss",
    "crop_weights",
    "instance_mask_loss",
    "semantic_target",
    "semantic_loss",
]
