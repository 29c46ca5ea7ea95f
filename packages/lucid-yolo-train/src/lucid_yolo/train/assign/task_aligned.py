"""Task-aligned label assignment (TOOD, Feng et al. 2021, §3.2) with small-target-aware candidates.

For every ground-truth instance the anchors are ranked by the alignment metric
``t = s^alpha * u^beta`` (``s`` the predicted probability of the instance's class, ``u`` the IoU of
the predicted box with the instance) among its *candidates*, the anchors whose point lies inside the
instance. The ``topk`` best become positives; an anchor claimed by several instances keeps the one
it overlaps most. The classification target of a positive is its alignment normalised per instance
so that the best anchor of an instance gets that instance's best IoU (TOOD eq. 10), which teaches
the classifier to rank anchors by localisation quality.

STAL (small-target-aware labels): an instance narrower or shorter than ``stal_threshold`` pixels may
contain no anchor point at all (P3 points are 8 px apart), so it would never be learned. For
*candidate selection only*, such a side is widened to ``stal_size`` pixels around the same centre;
the IoU, the alignment and the regression target still use the true box. The default
``stal_size = 16`` px (two P3 cells) guarantees at least one P3 point strictly inside.

The one-to-one (end-to-end) branch uses the same assigner with ``topk = 1``: one positive per
instance is what lets that branch drop NMS, and ranking by the same metric keeps the two branches
consistent (YOLOv10's consistent dual assignment).

Everything is static-shape: masks instead of boolean indexing, no ``nonzero``, no ``.item()`` and
no branch on tensor values, so the assigner can run inside a CUDA graph.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_yolo.models.geometry import box_iou
from lucid_yolo.train.assign.targets import AssignedTargets
from lucid_yolo.train.exceptions import TrainConfigError


class TaskAlignedAssigner:
    """Assign ground-truth instances to anchors by the task-alignment metric.

    Args:
        num_classes: ``C``, the number of classes.
        topk: positives per instance (10 for the one-to-many branch, 1 for one-to-one).
        alpha: exponent of the classification score in the alignment metric.
        beta: exponent of the IoU in the alignment metric.
        stal_threshold: sides (pixels) below this are widened for candidate selection; ``None``
            turns STAL off.
        stal_size: the widened side in pixels; at least ``stal_threshold``.
        eps: guards the normalisation and the point-in-box margin.

    Raises:
        TrainConfigError: for a non-positive ``num_classes`` or ``topk``, negative exponents, or a
            ``stal_size`` below ``stal_threshold``.
    """

    box_dim: int = 4

    def __init__(
        self,
        num_classes: int,
        *,
        topk: int = 10,
        alpha: float = 0.5,
        beta: float = 6.0,
        stal_threshold: float | None = 8.0,
        stal_size: float = 16.0,
        eps: float = 1e-9,
    ) -> None:
        if num_classes < 1:
            raise TrainConfigError(f"num_classes={num_classes!r}: expected at least 1 class")
        if topk < 1:
            raise TrainConfigError(f"topk={topk!r}: expected at least 1 positive per instance")
        if alpha < 0 or beta < 0:
            raise TrainConfigError(f"alpha={alpha!r}, beta={beta!r}: exponents must be >= 0")
        if stal_threshold is not None and stal_size < stal_threshold:
            raise TrainConfigError(
                f"stal_size={stal_size!r} is below stal_threshold={stal_threshold!r}: the "
                "surrogate must be at least as large as the sides it replaces"
            )
        self.num_classes = num_classes
        self.topk = topk
        self.alpha = alpha
        self.beta = beta
        self.stal_threshold = stal_threshold
        self.stal_size = stal_size
        self.eps = eps

    @torch.no_grad()
    def __call__(
        self,
        pred_scores: Tensor,
        pred_boxes: Tensor,
        points: Tensor,
        gt_classes: Tensor,
        gt_boxes: Tensor,
        valid: Tensor,
    ) -> AssignedTargets:
        """Compute the targets of one branch.

        Args:
            pred_scores: (B, A, C) predicted class probabilities (after sigmoid).
            pred_boxes: (B, A, 4) decoded predicted boxes, ``xyxy`` pixels.
            points: (A, 2) anchor points ``xy`` pixels.
            gt_classes: (B, N) int64 instance classes (``-1`` on padded rows).
            gt_boxes: (B, N, 4) instance boxes, ``xyxy`` pixels.
            valid: (B, N) bool, real instances.

        Returns:
            The per-anchor targets (:class:`AssignedTargets`).

        Raises:
            ValueError: when the shapes disagree or ``N`` is 0.
        """
        self._check_shapes(pred_scores, pred_boxes, points, gt_classes, gt_boxes, valid)
        B, A, C = pred_scores.shape
        N = gt_classes.shape[1]
        candidates = self._candidates(points, gt_boxes) & valid[..., None]  # (B, N, A)
        overlaps = torch.where(
            candidates, self._overlaps(gt_boxes, pred_boxes).clamp(min=0), 0.0
        )  # (B, N, A)
        class_index = gt_classes.clamp(min=0)[..., None].expand(B, N, A)
        class_scores = pred_scores.transpose(1, 2).gather(1, class_index)  # (B, N, A)
        align = class_scores.pow(self.alpha) * overlaps.pow(self.beta)
        align = torch.where(candidates, align, 0.0)

        top_index = align.topk(min(self.topk, A), dim=-1).indices  # (B, N, k)
        in_topk = torch.zeros_like(candidates).scatter_(-1, top_index, True)
        positive = in_topk & candidates  # (B, N, A)

        claims = positive.sum(1, keepdim=True)  # (B, 1, A)
        best = torch.where(positive, overlaps, -1.0).argmax(1)  # (B, A)
        rows = torch.arange(N, device=best.device)
        # F.one_hot would check the index range on the host; a comparison stays on the device.
        best_mask = rows[None, :, None] == best[:, None, :]  # (B, N, A)
        positive = torch.where(claims > 1, best_mask, positive)

        fg = positive.any(1)  # (B, A)
        gt_index = torch.where(positive, overlaps, -1.0).argmax(1)  # (B, A)
        labels = torch.where(fg, gt_classes.gather(1, gt_index), -1)
        boxes = gt_boxes.gather(1, gt_index[..., None].expand(B, A, gt_boxes.shape[-1]))

        align = torch.where(positive, align, 0.0)
        best_align = align.amax(-1, keepdim=True)  # (B, N, 1)
        best_overlap = torch.where(positive, overlaps, 0.0).amax(-1, keepdim=True)
        quality = (align * best_overlap / (best_align + self.eps)).amax(1)  # (B, A)
        class_ids = torch.arange(C, device=labels.device)
        one_hot = (labels.clamp(min=0)[..., None] == class_ids).to(pred_scores.dtype)  # (B, A, C)
        scores = one_hot * (quality * fg)[..., None]
        return AssignedTargets(labels=labels, boxes=boxes, scores=scores, fg=fg, gt_index=gt_index)

    def _surrogate_sizes(self, sizes: Tensor) -> Tensor:
        """Widen sides below ``stal_threshold`` to ``stal_size`` (STAL); (...) -> (...)."""
        if self.stal_threshold is None:
            return sizes
        return torch.where(sizes < self.stal_threshold, self.stal_size, sizes)

    def _candidates(self, points: Tensor, gt_boxes: Tensor) -> Tensor:
        """Anchors strictly inside each instance's (STAL) surrogate box.

        Args:
            points: (A, 2) ``xy`` pixels.
            gt_boxes: (B, N, 4) ``xyxy`` pixels.

        Returns:
            (B, N, A) bool.
        """
        centre = (gt_boxes[..., :2] + gt_boxes[..., 2:]) / 2
        half = self._surrogate_sizes(gt_boxes[..., 2:] - gt_boxes[..., :2]) / 2  # (B, N, 2)
        offset = (points - centre[:, :, None]).abs()  # (B, N, A, 2)
        margin = half[:, :, None] - offset
        return margin.amin(-1) > self.eps

    def _overlaps(self, gt_boxes: Tensor, pred_boxes: Tensor) -> Tensor:
        """IoU of every instance with every prediction; (B, N, 4), (B, A, 4) -> (B, N, A)."""
        return box_iou(gt_boxes[:, :, None], pred_boxes[:, None])

    def _check_shapes(
        self,
        pred_scores: Tensor,
        pred_boxes: Tensor,
        points: Tensor,
        gt_classes: Tensor,
        gt_boxes: Tensor,
        valid: Tensor,
    ) -> None:
        if pred_scores.dim() != 3 or pred_scores.shape[-1] != self.num_classes:
            raise ValueError(
                f"pred_scores has shape {tuple(pred_scores.shape)!r}: expected (B, A, "
                f"{self.num_classes}); transpose the (B, C, A) head output first"
            )
        B, A, _ = pred_scores.shape
        N = gt_classes.shape[-1]
        if N < 1:
            raise ValueError(
                f"gt_classes has shape {tuple(gt_classes.shape)!r}: pad the batch to at least "
                "one instance row (valid=False) so the shapes stay static"
            )
        expected = {
            "pred_boxes": (pred_boxes, (B, A, self.box_dim)),
            "points": (points, (A, 2)),
            "gt_classes": (gt_classes, (B, N)),
            "gt_boxes": (gt_boxes, (B, N, self.box_dim)),
            "valid": (valid, (B, N)),
        }
        for name, (tensor, shape) in expected.items():
            if tuple(tensor.shape) != shape:
                raise ValueError(
                    f"{name} has shape {tuple(tensor.shape)!r}: expected {shape!r} to match "
                    f"pred_scores {tuple(pred_scores.shape)!r}"
                )


__all__ = ["TaskAlignedAssigner"]
