"""End-to-end decoding: the one-to-one branch's top-k, no IoU step.

The one-to-one branch is trained to give each object a single high-scoring anchor, so the
best ``k`` (anchor, class) pairs are the detections (YOLOv10/YOLO26 NMS-free inference). An
anchor may appear with several classes. Shapes stay static (``k`` is fixed), so the same code
serves the ONNX export.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.decode.dense import decode_dense
from lucid_yolo.models.decode.masks import assemble_masks, mask_probabilities
from lucid_yolo.models.decode.results import DensePredictions, Detections
from lucid_yolo.models.model import STRIDES

MAX_DETECTIONS = 300


def _gather(values: Tensor, index: Tensor) -> Tensor:
    """``values`` (B, A, *rest) at ``index`` (B, k) → (B, k, *rest)."""
    shape = index.shape + (1,) * (values.dim() - 2)
    return values.gather(1, index.reshape(shape).expand(*index.shape, *values.shape[2:]))


def topk_pairs(scores: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The ``k`` best (anchor, class) pairs of each image.

    First keeps the ``k`` anchors with the best class score, then the best ``k`` pairs among
    their ``k × C`` scores: the same pairs as a top-k over all ``A × C`` pairs (every pair of
    that top-k lies on one of the ``k`` best anchors), for a fraction of the work.

    Args:
        scores: (B, A, C) probabilities.
        k: pairs to keep; at most ``A`` anchors are considered.

    Returns:
        ``scores`` (B, k'), ``anchors`` (B, k') int64, ``classes`` (B, k') int64, best first,
        with ``k' = min(k, A · C)``.
    """
    B, A, C = scores.shape
    k_anchors = min(k, A)
    anchor_index = scores.amax(dim=-1).topk(k_anchors, dim=1).indices  # (B, k_anchors)
    candidate = _gather(scores, anchor_index).reshape(B, k_anchors * C)
    best, flat = candidate.topk(min(k, k_anchors * C), dim=1)
    anchors = anchor_index.gather(1, torch.div(flat, C, rounding_mode="floor"))
    return best, anchors, flat % C


def topk_dense(
    dense: DensePredictions,
    k: int = MAX_DETECTIONS,
    *,
    masks: bool = True,
    conf_threshold: float | None = None,
) -> dict[str, Tensor]:
    """Select the top-k of dense predictions, static shapes.

    Args:
        dense: the dense predictions.
        k: rows kept per image.
        masks: segment: also build ``masks``; ``False`` leaves them to the caller, which
            saves B · k · H/4 · W/4 floats of work and memory (32 MiB per image at 640 px).
        conf_threshold: also flag the rows scoring at or above it in ``valid``. The rows stay,
            so the shapes stay static: dropping them by a boolean index makes the host wait for
            the device, which a validation pass on the GPU should not (issue 11).

    Returns:
        ``boxes`` (B, k, 4), ``scores`` (B, k), ``classes`` (B, k) int64, and when present
        ``mask_coef`` (B, k, M) with ``masks`` (B, k, H/4, W/4) cropped probabilities,
        ``keypoints`` (B, k, K, 3), ``rboxes`` (B, k, 5), ``valid`` (B, k) bool (a prefix of
        each image's rows, since they are best first).
    """
    scores, anchors, classes = topk_pairs(dense.scores, k)
    result = {"boxes": _gather(dense.boxes, anchors), "scores": scores, "classes": classes}
    if conf_threshold is not None:
        result["valid"] = scores >= conf_threshold
    if dense.keypoints is not None:
        result["keypoints"] = _gather(dense.keypoints, anchors)
    if dense.rboxes is not None:
        result["rboxes"] = _gather(dense.rboxes, anchors)
    if dense.mask_coef is not None and dense.protos is not None:
        coef = _gather(dense.mask_coef, anchors)
        result["mask_coef"] = coef
        if masks:
            result["masks"] = mask_probabilities(coef, dense.protos, result["boxes"])
    return result


def decode_end2end(
    raw: Mapping[str, Tensor],
    image_size: tuple[int, int],
    *,
    conf_threshold: float = 0.25,
    max_det: int = MAX_DETECTIONS,
    strides: Sequence[int] = STRIDES,
    assemble_masks_at_input: bool = True,
) -> list[Detections]:
    """Detections of every image from the one-to-one branch.

    Args:
        raw: the network's output dict.
        image_size: ``(H, W)`` of the network input.
        conf_threshold: drop detections scoring below this.
        max_det: at most this many detections per image (≤ 300 in the YOLO26 protocol).
        strides: the network's strides.
        assemble_masks_at_input: segment: also build ``masks`` at input resolution; ``False``
            keeps only ``mask_coef`` and ``protos`` (an evaluator that needs masks at another
            size skips N · H · W floats of work and memory per image).

    Returns:
        One :class:`Detections` per image.
    """
    dense = decode_dense(raw, image_size, branch=keys.O2O, strides=strides)
    # masks are assembled per image below
    top = topk_dense(dense, max_det, masks=False, conf_threshold=conf_threshold)
    detections = []
    for i in range(top["scores"].shape[0]):
        keep = top["valid"][i]
        boxes = top["boxes"][i][keep]
        masks = coef = protos = None
        if dense.protos is not None:
            coef, protos = top["mask_coef"][i][keep], dense.protos[i]
            if assemble_masks_at_input:
                masks = assemble_masks(coef, protos, boxes, image_size)
        detections.append(
            Detections(
                boxes=boxes,
                scores=top["scores"][i][keep],
                classes=top["classes"][i][keep],
                masks=masks,
                keypoints=top["keypoints"][i][keep] if "keypoints" in top else None,
                rboxes=top["rboxes"][i][keep] if "rboxes" in top else None,
                mask_coef=coef,
                protos=protos,
            )
        )
    return detections


__all__ = ["MAX_DETECTIONS", "decode_end2end", "topk_dense", "topk_pairs"]
