"""Typed decoding results: dense per-anchor predictions and per-image detections.

Coordinates are pixels of the network input (after letterbox); mapping them back to the source
image is the caller's business (the batch's ``scale_pad`` says how).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class DensePredictions:
    """Every anchor's decoded prediction, one branch, static shapes.

    Attributes:
        boxes: (B, A, 4) ``xyxy`` pixels (for OBB: the rotated box's axis-aligned hull).
        scores: (B, A, C) class probabilities.
        mask_coef: (B, A, M) segment: prototype coefficients, else ``None``.
        protos: (B, M, H/4, W/4) segment: prototypes, else ``None``.
        keypoints: (B, A, K, 3) pose: ``x, y`` pixels and visibility probability, else ``None``.
        rboxes: (B, A, 5) obb: ``xywhr`` pixels/radians, long-edge convention with
            ``r`` in ``[-pi/4, 3pi/4)``, else ``None``.
    """

    boxes: Tensor
    scores: Tensor
    mask_coef: Tensor | None = None
    protos: Tensor | None = None
    keypoints: Tensor | None = None
    rboxes: Tensor | None = None


@dataclass(frozen=True)
class Detections:
    """The detections of one image, best first.

    Attributes:
        boxes: (N, 4) ``xyxy`` pixels (for OBB: the rotated box's axis-aligned hull).
        scores: (N,) confidence in ``[0, 1]``.
        classes: (N,) int64 class ids.
        masks: (N, H, W) bool instance masks at input resolution (segment, unless the decoder
            was asked not to assemble them), else ``None``.
        mask_coef: (N, M) prototype coefficients (segment), else ``None``.
        protos: (M, H/4, W/4) the image's prototypes (segment), else ``None``; with
            ``mask_coef`` they give masks at any resolution (the evaluator's source-size masks).
        keypoints: (N, K, 3) ``x, y`` pixels and visibility probability (pose), else ``None``.
        rboxes: (N, 5) ``xywhr`` (obb), else ``None``.
    """

    boxes: Tensor
    scores: Tensor
    classes: Tensor
    masks: Tensor | None = None
    keypoints: Tensor | None = None
    rboxes: Tensor | None = None
    mask_coef: Tensor | None = None
    protos: Tensor | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])


__all__ = ["DensePredictions", "Detections"]
