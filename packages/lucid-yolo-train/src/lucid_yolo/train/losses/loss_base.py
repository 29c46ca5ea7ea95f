"""The loss every task shares: anchors, per-branch assignment, classification, ProgLoss, gains.

A task loss is called as ``loss(outputs, batch, epoch_fraction) -> (total, terms)``: ``outputs``
the raw network dict (:mod:`lucid_yolo.models.outputs`), ``batch`` the padded dense
:class:`~lucid_yolo.train.data.batch.Batch`. For each branch (``o2m``, ``o2o``) it decodes the
predictions, assigns targets (``topk`` 10 and 1) and computes named terms; the two branches are
mixed by ProgLoss, every term is multiplied by its gain in :class:`LossGains`, and the sum is the
differentiable total. Subclasses add task terms by overriding :meth:`YoloLoss._task_terms` (per
branch) and :meth:`YoloLoss._shared_terms` (outputs without a branch, e.g. the semantic head).

Everything is static-shape and free of host syncs, so the whole loss can later run inside a CUDA
graph. It runs in float32 with autocast disabled: the terms are reductions over many anchors, and
bf16 accumulation would make them noisier for no speed that matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lucid_yolo.models.anchors import distances_to_xyxy, make_anchors, xyxy_to_distances
from lucid_yolo.models.geometry import box_ciou
from lucid_yolo.models.outputs import BOX, BRANCHES, CLS, O2M, O2O, branch_key
from lucid_yolo.train.assign import AssignedTargets, TaskAlignedAssigner
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.losses.gains import LossGains
from lucid_yolo.train.losses.progloss import O2M_WEIGHT_END, O2M_WEIGHT_START, o2m_weight_at


@dataclass(frozen=True)
class BranchContext:
    """Everything a term of one branch needs, computed once per branch.

    Attributes:
        branch: ``"o2m"`` or ``"o2o"``.
        outputs: the raw network outputs, float32.
        batch: the padded dense batch.
        points: (A, 2) anchor points ``xy`` pixels.
        strides: (A, 1) stride of each anchor in pixels.
        distances: (B, A, 4) predicted edge distances in stride units.
        pred_boxes: (B, A, 4) decoded ``xyxy`` pixels, or (B, A, 5) ``xywhr`` for OBB.
        targets: the assigner's output.
        fg_weight: (B, A) target score of each anchor (sum over classes; 0 on background).
        score_sum: () sum of all target scores, at least 1: the normaliser of the dense terms.
    """

    branch: str
    outputs: dict[str, Tensor]
    batch: Batch
    points: Tensor
    strides: Tensor
    distances: Tensor
    pred_boxes: Tensor
    targets: AssignedTargets
    fg_weight: Tensor
    score_sum: Tensor

    def output(self, name: str) -> Tensor:
        """This branch's raw output ``name`` (e.g. ``"kpt"`` reads ``"o2m.kpt"``)."""
        return self.outputs[branch_key(self.branch, name)]


class YoloLoss(nn.Module):
    """Dual-branch YOLO26 loss; as is, the detection loss (cls + CIoU + L1).

    Args:
        num_classes: ``C``.
        strides: pixels per cell of each head level, in the order of the ``A`` axis.
        gains: the term multipliers.
        topk: positives per instance of the one-to-many branch.
        o2o_topk: positives per instance of the one-to-one branch.
        alpha: score exponent of the alignment metric.
        beta: IoU exponent of the alignment metric.
        stal_threshold: STAL side threshold in pixels (``None`` disables STAL).
        stal_size: STAL surrogate side in pixels.
        o2m_start: ProgLoss one-to-many weight at the start of training.
        o2m_end: ProgLoss one-to-many weight at the end of training.
        scale_by_batch: multiply the total by the batch size, the convention the published YOLO
            learning rates were tuned under (the terms are per-image means).

    Raises:
        TrainConfigError: for an empty ``strides``.
    """

    task: ClassVar[str] = "detect"

    def __init__(
        self,
        num_classes: int,
        *,
        strides: Sequence[int] = (8, 16, 32),
        gains: LossGains | None = None,
        topk: int = 10,
        o2o_topk: int = 1,
        alpha: float = 0.5,
        beta: float = 6.0,
        stal_threshold: float | None = 8.0,
        stal_size: float = 16.0,
        o2m_start: float = O2M_WEIGHT_START,
        o2m_end: float = O2M_WEIGHT_END,
        scale_by_batch: bool = True,
    ) -> None:
        super().__init__()
        if not strides:
            raise TrainConfigError(
                f"strides={strides!r}: give one stride per head level, e.g. (8, 16, 32)"
            )
        self.num_classes = num_classes
        self.strides = tuple(strides)
        self.gains = gains if gains is not None else LossGains()
        self.alpha = alpha
        self.beta = beta
        self.stal_threshold = stal_threshold
        self.stal_size = stal_size
        self.assigners = {O2M: self._make_assigner(topk), O2O: self._make_assigner(o2o_topk)}
        self.o2m_start = o2m_start
        self.o2m_end = o2m_end
        self.scale_by_batch = scale_by_batch
        self._anchor_cache: dict[tuple[int, int, str], tuple[Tensor, Tensor]] = {}

    def forward(
        self, outputs: dict[str, Tensor], batch: Batch, epoch_fraction: float | Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Compute the loss of one batch.

        Args:
            outputs: raw network outputs (:mod:`lucid_yolo.models.outputs`).
            batch: the padded dense batch.
            epoch_fraction: training progress in [0, 1] for ProgLoss (a 0-dim device tensor when
                the loss runs inside a CUDA graph).

        Returns:
            ``total`` (), differentiable, and the detached ``terms`` for logging: each weighted
            mixed term by name (``"box"``, ``"cls"``, ...), each unweighted per-branch term
            (``"o2m/box"``, ...) and ``"o2m_weight"``.
        """
        device = batch["images"].device
        with torch.autocast(device.type, enabled=False):
            float_outputs = {key: value.float() for key, value in outputs.items()}
            points, strides = self._anchors(batch, float_outputs)
            per_branch = {
                branch: self._branch_terms(branch, float_outputs, batch, points, strides)
                for branch in BRANCHES
            }
            weight = o2m_weight_at(epoch_fraction, self.o2m_start, self.o2m_end)
            mixed = {
                name: weight * per_branch[O2M][name] + (1 - weight) * per_branch[O2O][name]
                for name in per_branch[O2M]
            }
            mixed.update(self._shared_terms(float_outputs, batch))
            weighted = self.gains.apply(mixed)
            total = torch.stack(list(weighted.values())).sum()
            if self.scale_by_batch:
                total = total * batch["images"].shape[0]
        terms = {name: value.detach() for name, value in weighted.items()}
        for branch, branch_terms in per_branch.items():
            terms.update({f"{branch}/{name}": v.detach() for name, v in branch_terms.items()})
        terms["o2m_weight"] = (
            weight.detach() if isinstance(weight, Tensor) else torch.full((), weight, device=device)
        )
        return total, terms

    def _make_assigner(self, topk: int) -> TaskAlignedAssigner:
        """The assigner of a branch with ``topk`` positives per instance."""
        return TaskAlignedAssigner(
            self.num_classes,
            topk=topk,
            alpha=self.alpha,
            beta=self.beta,
            stal_threshold=self.stal_threshold,
            stal_size=self.stal_size,
        )

    def _anchors(self, batch: Batch, outputs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Anchor points (A, 2) and strides (A, 1) for the batch's input size, cached."""
        height, width = batch["images"].shape[-2:]
        device = batch["images"].device
        key = (height, width, str(device))
        if key not in self._anchor_cache:
            sizes = [(height // stride, width // stride) for stride in self.strides]
            self._anchor_cache[key] = make_anchors(sizes, self.strides, device=device)
        points, strides = self._anchor_cache[key]
        anchors = outputs[branch_key(O2M, CLS)].shape[-1]
        if anchors != points.shape[0]:
            raise TrainConfigError(
                f"outputs have {anchors!r} anchors but a {height}x{width} input with strides "
                f"{self.strides!r} gives {points.shape[0]!r}: pass the head's strides and an "
                "input size divisible by the largest stride"
            )
        return points, strides

    def _branch_terms(
        self,
        branch: str,
        outputs: dict[str, Tensor],
        batch: Batch,
        points: Tensor,
        strides: Tensor,
    ) -> dict[str, Tensor]:
        """Assign one branch and compute its unweighted terms (scalars)."""
        logits = outputs[branch_key(branch, CLS)].transpose(1, 2)  # (B, A, C)
        distances = outputs[branch_key(branch, BOX)].transpose(1, 2)  # (B, A, 4) stride units
        pred_boxes = self._decode_boxes(outputs, branch, distances, points, strides)
        targets = self.assigners[branch](
            logits.detach().sigmoid(),
            pred_boxes.detach(),
            points,
            batch["classes"],
            self._gt_boxes(batch),
            batch["valid"],
        )
        score_sum = targets.scores.sum().clamp(min=1)
        ctx = BranchContext(
            branch=branch,
            outputs=outputs,
            batch=batch,
            points=points,
            strides=strides,
            distances=distances,
            pred_boxes=pred_boxes,
            targets=targets,
            fg_weight=targets.scores.sum(-1),
            score_sum=score_sum,
        )
        cls = F.binary_cross_entropy_with_logits(logits, targets.scores, reduction="sum")
        terms = {"cls": cls / score_sum}
        terms.update(self._box_terms(ctx))
        terms.update(self._task_terms(ctx))
        return terms

    def _decode_boxes(
        self,
        outputs: dict[str, Tensor],
        branch: str,
        distances: Tensor,
        points: Tensor,
        strides: Tensor,
    ) -> Tensor:
        """Predicted boxes: ``(ax - l, ay - t, ax + r, ay + b) * stride``; -> (B, A, 4) xyxy px."""
        return distances_to_xyxy(distances * strides, points)

    def _gt_boxes(self, batch: Batch) -> Tensor:
        """Instance boxes in the assigner's format: (B, N, 4) ``xyxy`` pixels."""
        return batch["boxes"]

    def _target_distances(self, ctx: BranchContext) -> Tensor:
        """Edge distances of the assigned boxes from each anchor; -> (B, A, 4) stride units."""
        return xyxy_to_distances(ctx.targets.boxes, ctx.points) / ctx.strides

    def _overlap(self, ctx: BranchContext, pred_boxes: Tensor) -> Tensor:
        """Overlap of predictions with their targets for the box term; -> (B, A)."""
        return box_ciou(pred_boxes, ctx.targets.boxes)

    def _box_terms(self, ctx: BranchContext) -> dict[str, Tensor]:
        """``box`` (1 - overlap) and ``l1`` on edge distances, weighted by target score.

        Background anchors compute on their target box instead of their prediction, so a wild
        background prediction cannot turn the zero weight into ``0 * inf = nan``.
        """
        fg = ctx.targets.fg[..., None]
        pred_boxes = torch.where(fg, ctx.pred_boxes, ctx.targets.boxes)
        box = ((1 - self._overlap(ctx, pred_boxes)) * ctx.fg_weight).sum() / ctx.score_sum
        target_distances = self._target_distances(ctx)
        distances = torch.where(fg, ctx.distances, target_distances)
        l1 = (distances - target_distances).abs().mean(-1)
        return {"box": box, "l1": (l1 * ctx.fg_weight).sum() / ctx.score_sum}

    def _task_terms(self, ctx: BranchContext) -> dict[str, Tensor]:
        """Extra per-branch terms of a task (none for detection)."""
        return {}

    def _shared_terms(self, outputs: dict[str, Tensor], batch: Batch) -> dict[str, Tensor]:
        """Terms of outputs shared by both branches, not mixed by ProgLoss (none for detection)."""
        return {}


class DetectionLoss(YoloLoss):
    """Detection loss: BCE classification, CIoU and L1 box terms on both branches."""

    task: ClassVar[str] = "detect"


__all__ = ["BranchContext", "DetectionLoss", "YoloLoss"]
