"""Class-wise non-maximum suppression for the one-to-many branch (axis-aligned and rotated).

Greedy NMS keeps the best box, drops every box of the same class overlapping it by more than
the threshold, and repeats. Here it is computed on the whole overlap matrix: with candidates
sorted best first, box ``i`` is kept iff no *kept* box ``j < i`` of its class overlaps it. That
rule has exactly one solution (by induction over ``i``) and iterating it from "keep all"
reaches it, fixing at least one more leading box per pass; in practice a few passes suffice, each
one batched matrix–vector step. The result equals the classic sequential loop exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.decode.dense import decode_dense
from lucid_yolo.models.decode.masks import assemble_masks
from lucid_yolo.models.decode.results import Detections
from lucid_yolo.models.geometry import box_iou, probiou
from lucid_yolo.models.model import STRIDES


def greedy_keep(suppresses: Tensor) -> Tensor:
    """Solve greedy NMS on a suppression matrix.

    Args:
        suppresses: (N, N) bool, ``[i, j]`` true when ``j`` would suppress ``i`` (only
            ``j < i`` is read: candidates are sorted best first).

    Returns:
        (N,) bool: kept candidates.
    """
    n = suppresses.shape[0]
    earlier = torch.ones(n, n, dtype=torch.bool, device=suppresses.device).tril(-1)
    by_earlier = (suppresses & earlier).to(torch.float32)
    keep = torch.ones(n, dtype=torch.bool, device=suppresses.device)
    for _ in range(n + 1):
        updated = (by_earlier @ keep.to(torch.float32)) == 0
        if torch.equal(updated, keep):
            break
        keep = updated
    return keep


def nms(
    boxes: Tensor,
    scores: Tensor,
    classes: Tensor,
    iou_threshold: float,
    *,
    overlap: Callable[[Tensor, Tensor], Tensor] = box_iou,
) -> Tensor:
    """Class-wise greedy NMS.

    Args:
        boxes: (N, D) boxes (``xyxy`` for :func:`~lucid_yolo.models.geometry.box_iou`,
            ``xywhr`` for :func:`~lucid_yolo.models.geometry.probiou`).
        scores: (N,) confidences.
        classes: (N,) class ids; boxes of different classes never suppress each other.
        iou_threshold: suppress when the overlap is strictly above this.
        overlap: broadcasting overlap function; called as ``(N, 1, D), (1, N, D) → (N, N)``.

    Returns:
        (N',) int64 indices of kept boxes, best first.
    """
    order = scores.argsort(descending=True, stable=True)
    boxes, classes = boxes[order], classes[order]
    suppresses = (overlap(boxes[:, None], boxes[None]) > iou_threshold) & (
        classes[:, None] == classes[None, :]
    )
    return order[greedy_keep(suppresses)]


def rotated_nms(rboxes: Tensor, scores: Tensor, classes: Tensor, iou_threshold: float) -> Tensor:
    """Class-wise greedy NMS of ``xywhr`` boxes with ProbIoU as the overlap; see :func:`nms`."""
    return nms(rboxes, scores, classes, iou_threshold, overlap=probiou)


def decode_nms(
    raw: Mapping[str, Tensor],
    image_size: tuple[int, int],
    *,
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.7,
    max_det: int = 300,
    max_candidates: int = 3000,
    strides: Sequence[int] = STRIDES,
) -> list[Detections]:
    """Detections of every image from the one-to-many branch, through class-wise NMS.

    Each anchor contributes its best class (after the confidence threshold); at most
    ``max_candidates`` best candidates enter NMS, whose memory grows with their square.

    Args:
        raw: the network's output dict.
        image_size: ``(H, W)`` of the network input.
        conf_threshold: drop candidates scoring below this.
        iou_threshold: NMS overlap threshold (ProbIoU for OBB).
        max_det: at most this many detections per image.
        max_candidates: at most this many candidates per image enter NMS.
        strides: the network's strides.

    Returns:
        One :class:`Detections` per image.
    """
    dense = decode_dense(raw, image_size, branch=keys.O2M, strides=strides)
    best, classes = dense.scores.max(dim=-1)  # (B, A)
    detections = []
    for i in range(best.shape[0]):
        candidates = (best[i] >= conf_threshold).nonzero().squeeze(1)
        candidates = candidates[best[i][candidates].argsort(descending=True)][:max_candidates]
        scores, labels = best[i][candidates], classes[i][candidates]
        if dense.rboxes is not None:
            kept = rotated_nms(dense.rboxes[i][candidates], scores, labels, iou_threshold)
        else:
            kept = nms(dense.boxes[i][candidates], scores, labels, iou_threshold)
        index = candidates[kept[:max_det]]
        boxes = dense.boxes[i][index]
        masks = coef = protos = None
        if dense.mask_coef is not None and dense.protos is not None:
            coef, protos = dense.mask_coef[i][index], dense.protos[i]
            masks = assemble_masks(coef, protos, boxes, image_size)
        detections.append(
            Detections(
                boxes=boxes,
                scores=best[i][index],
                classes=classes[i][index],
                masks=masks,
                keypoints=dense.keypoints[i][index] if dense.keypoints is not None else None,
                rboxes=dense.rboxes[i][index] if dense.rboxes is not None else None,
                mask_coef=coef,
                protos=protos,
            )
        )
    return detections


__all__ = ["decode_nms", "greedy_keep", "nms", "rotated_nms"]
