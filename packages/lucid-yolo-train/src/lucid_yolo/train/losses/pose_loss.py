"""Pose loss: keypoints as a Laplace likelihood with learned scale, plus OKS and visibility.

Each positive anchor regresses every keypoint of its instance as an offset ``d`` from the anchor
point in stride units (``kpt = (a + d) * stride``) together with a log-scale ``s`` per coordinate.
The residual is scored by the negative log-likelihood of a Laplace density,
``log(2 b) + |d - d*| / b`` with ``b = exp(s)``: the net learns how sure it is of each point, and
confident points are pulled harder, as in residual log-likelihood estimation (Li et al. 2021)
with a fixed Laplace base instead of a flow. ``s`` is clamped to ``[log_scale_min,
log_scale_max]`` before use, so ``b`` is bounded away from 0 and infinity and the density cannot
become non-finite whatever the net outputs.

``1 - OKS`` (COCO's keypoint similarity, in pixels, with the box area as object scale) aligns the
training signal with the metric, and a BCE teaches the visibility logit whether a keypoint is
labelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_yolo.models.geometry import box_area
from lucid_yolo.models.outputs import KPT, KPT_SCALE
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.geometry.keypoint_ops import keypoint_oks, keypoint_sigmas
from lucid_yolo.train.losses.loss_base import BranchContext, YoloLoss


def laplace_nll(
    pred: Tensor,
    target: Tensor,
    log_scale: Tensor,
    *,
    log_scale_min: float = -5.0,
    log_scale_max: float = 5.0,
) -> Tensor:
    """Negative log-likelihood of ``target`` under ``Laplace(pred, exp(log_scale))``.

    Args:
        pred: (...) predicted location.
        target: (...) true location, same units.
        log_scale: (...) predicted log of the Laplace scale ``b``, same units.
        log_scale_min: lower clamp of ``log_scale``.
        log_scale_max: upper clamp of ``log_scale``.

    Returns:
        (...) ``log(2) + s + |pred - target| * exp(-s)`` with ``s`` the clamped log-scale; finite
        for any finite ``pred``/``target`` and any ``log_scale`` (including +-inf).
    """
    scale = log_scale.clamp(log_scale_min, log_scale_max)
    return math.log(2.0) + scale + (pred - target).abs() * torch.exp(-scale)


class PoseLoss(YoloLoss):
    """Detection terms plus ``kpt_nll``, ``kpt_oks`` and ``kpt_vis`` on both branches.

    Args:
        num_classes: ``C``.
        num_keypoints: ``K``.
        sigmas: per-keypoint OKS sigmas; default :func:`keypoint_sigmas` (COCO for 17 points).
        log_scale_min: lower clamp of the predicted log-scales (stride units).
        log_scale_max: upper clamp of the predicted log-scales.
        **kwargs: the arguments of :class:`~lucid_yolo.train.losses.loss_base.YoloLoss`.

    Raises:
        TrainConfigError: when ``sigmas`` has not ``K`` entries or the clamp range is empty.
    """

    task: ClassVar[str] = "pose"
    sigmas: Tensor

    def __init__(
        self,
        num_classes: int,
        *,
        num_keypoints: int = 17,
        sigmas: Sequence[float] | None = None,
        log_scale_min: float = -5.0,
        log_scale_max: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_classes, **kwargs)
        values = tuple(sigmas) if sigmas is not None else keypoint_sigmas(num_keypoints)
        if len(values) != num_keypoints:
            raise TrainConfigError(
                f"got {len(values)!r} sigmas for num_keypoints={num_keypoints!r}: pass one sigma "
                "per keypoint or none for the default rule"
            )
        if not log_scale_min < log_scale_max:
            raise TrainConfigError(
                f"log_scale_min={log_scale_min!r} must be below log_scale_max={log_scale_max!r}"
            )
        self.num_keypoints = num_keypoints
        self.log_scale_min = log_scale_min
        self.log_scale_max = log_scale_max
        self.register_buffer("sigmas", torch.tensor(values), persistent=False)

    def _task_terms(self, ctx: BranchContext) -> dict[str, Tensor]:
        K = self.num_keypoints
        raw = ctx.output(KPT)
        B, channels, A = raw.shape
        if channels != 3 * K:
            raise TrainConfigError(
                f"{ctx.branch}.kpt has {channels!r} channels: expected 3 * num_keypoints = "
                f"{3 * K!r}; build the loss with the model's num_keypoints"
            )
        kpt = raw.reshape(B, K, 3, A).permute(0, 3, 1, 2)  # (B, A, K, 3): dx, dy, visibility logit
        log_scale = ctx.output(KPT_SCALE).reshape(B, K, 2, A).permute(0, 3, 1, 2)  # (B, A, K, 2)
        labelled = ctx.batch["keypoints"]  # (B, N, K, 3)
        gt = labelled.gather(1, ctx.targets.gt_index[..., None, None].expand(B, A, K, 3))
        points = ctx.points[None, :, None, :]  # (1, A, 1, 2)
        strides = ctx.strides[None, :, None, :]  # (1, A, 1, 1)
        fg = ctx.targets.fg
        labelled_visible = gt[..., 2] > 0  # (B, A, K)
        visible = labelled_visible & fg[..., None]
        fg_count = fg.sum().clamp(min=1)

        target_offsets = (gt[..., :2] - points) / strides
        nll = laplace_nll(
            kpt[..., :2],
            target_offsets,
            log_scale,
            log_scale_min=self.log_scale_min,
            log_scale_max=self.log_scale_max,
        ).sum(-1)  # (B, A, K)
        per_anchor_nll = torch.where(visible, nll, 0.0).sum(-1) / visible.sum(-1).clamp(min=1)

        pred_px = points + kpt[..., :2] * strides
        oks = keypoint_oks(
            pred_px, gt[..., :2], visible, box_area(ctx.targets.boxes), self.sigmas.to(pred_px)
        )
        scored = visible.any(-1)  # (B, A)
        oks_loss = torch.where(scored, 1 - oks, 0.0).sum() / scored.sum().clamp(min=1)

        vis_bce = F.binary_cross_entropy_with_logits(
            kpt[..., 2], labelled_visible.float(), reduction="none"
        ).mean(-1)  # (B, A)
        return {
            "kpt_nll": per_anchor_nll.sum() / fg_count,
            "kpt_oks": oks_loss,
            "kpt_vis": torch.where(fg, vis_bce, 0.0).sum() / fg_count,
        }


__all__ = ["PoseLoss", "laplace_nll"]
