"""The YOLO26 network: backbone → neck → dual head (+ prototypes for segmentation).

The network maps normalised images to the flat raw-output dict of
:mod:`lucid_yolo.models.outputs`; it knows nothing of losses or decoding. Its training forward
is free of host syncs and of branches on tensor values, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Final, Literal, get_args

from torch import Tensor, nn

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.backbone import Backbone
from lucid_yolo.models.exceptions import ModelConfigError
from lucid_yolo.models.heads import Branch, DualHead, box_branch, cls_branch, extra_branch
from lucid_yolo.models.neck import Neck
from lucid_yolo.models.protos import Protos
from lucid_yolo.models.scales import Scale
from lucid_yolo.models.weight_casts import casting_weights

Task = Literal["detect", "segment", "pose", "obb"]
TASKS: Final[tuple[Task, ...]] = get_args(Task)
STRIDES: Final = (8, 16, 32)


class YOLO26(nn.Module):
    """A YOLO26 network for one task and scale.

    Args:
        task: ``detect``, ``segment``, ``pose`` or ``obb``.
        scale: model size (see :data:`lucid_yolo.models.scales.SCALES`).
        num_classes: classes ``C``.
        kpt_shape: pose only: ``(K, 3)`` keypoints with (x, y, visibility).
        num_masks: segment only: prototypes ``M``.
        in_channels: image channels.

    Attributes:
        strides: input pixels per cell of P3, P4, P5: ``(8, 16, 32)``.
        casts_weights_together: in a training forward under autocast, each forward part
            casts its convolutions' trainable weights in one multi-tensor copy, and their
            gradients back one block at a time (:mod:`lucid_yolo.models.weight_casts`: the
            same bits, in place of autocast's 276 per-tensor casts a step in yolo26n). Off
            for a network built alone, which then runs autocast's own casts; the trainer's
            ``YoloModule`` turns it on (on an H100 it shortened a replayed detect batch-4 step
            by about 0.6 ms at the same peak memory, session 49).

    Raises:
        ModelConfigError: on an unknown task, a class count below 1, or a keypoint shape that is
            not ``(K >= 1, 3)``.
    """

    def __init__(
        self,
        task: Task,
        scale: Scale,
        *,
        num_classes: int = 80,
        kpt_shape: tuple[int, int] = (17, 3),
        num_masks: int = 32,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ModelConfigError(f"unknown task {task!r}: expected one of {TASKS!r}")
        if num_classes < 1:
            raise ModelConfigError(f"num_classes={num_classes!r}: pass at least 1 class")
        if len(kpt_shape) != 2 or kpt_shape[0] < 1 or kpt_shape[1] != 3:
            raise ModelConfigError(
                f"kpt_shape={kpt_shape!r}: expected (K, 3) with K >= 1 keypoints of "
                "(x, y, visibility)"
            )
        if num_masks < 1:
            raise ModelConfigError(f"num_masks={num_masks!r}: pass at least 1 prototype")
        self.task: Task = task
        self.scale = scale
        self.num_classes = num_classes
        self.kpt_shape = kpt_shape
        self.num_masks = num_masks
        self.strides = STRIDES
        self.casts_weights_together = False

        self.backbone = Backbone(scale, in_channels)
        self.neck = Neck(scale, self.backbone.out_channels)
        channels = self.neck.out_channels
        branches: dict[str, Branch] = {
            keys.BOX: box_branch(channels),
            keys.CLS: cls_branch(channels, num_classes, self.strides),
        }
        self.protos: Protos | None = None
        if task == "segment":
            branches[keys.MASK_COEF] = extra_branch(channels, [(keys.MASK_COEF, num_masks)])
            self.protos = Protos(channels, scale.channels(256), num_masks, num_classes)
        elif task == "pose":
            K = kpt_shape[0]
            kpt_outputs = [(keys.KPT, 3 * K), (keys.KPT_SCALE, 2 * K)]
            branches[keys.KPT] = extra_branch(channels, kpt_outputs)
        elif task == "obb":
            branches[keys.ANGLE] = extra_branch(channels, [(keys.ANGLE, 1)])
        self.head = DualHead(branches)

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """Run the network.

        Args:
            images: ``(B, 3, H, W)`` float RGB in ``[0, 1]``, ``H`` and ``W`` multiples of 32.

        Returns:
            The raw outputs keyed as in :mod:`lucid_yolo.models.outputs` (``semantic`` only in
            training mode).
        """
        features = self.features(images)
        result = self.predictions(features)
        result.update(self.segment_outputs(features))
        return result

    def features(self, images: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Backbone and neck: images ``(B, 3, H, W)`` → N3, N4, N5 at strides 8, 16, 32.

        The forward's first half on its own, so that a caller (the trainer's replay regions) can
        run the network in parts without a copy of its wiring.
        """
        with self._casting(self.backbone, self.neck):
            features: tuple[Tensor, Tensor, Tensor] = self.neck(*self.backbone(images))
        return features

    def predictions(self, features: Sequence[Tensor]) -> dict[str, Tensor]:
        """The dual head over N3, N4, N5: ``{"o2m.<name>": (B, c, A), "o2o.<name>": (B, c, A)}``."""
        with self._casting(self.head):
            result: dict[str, Tensor] = self.head(features)
        return result

    def segment_outputs(self, features: Sequence[Tensor]) -> dict[str, Tensor]:
        """Segment only: prototypes ``(B, M, H/4, W/4)`` and, in training mode, semantic logits
        ``(B, C, H/8, W/8)`` over N3, N4, N5; empty for the other tasks."""
        if self.protos is None:
            return {}
        with self._casting(self.protos):
            protos, semantic = self.protos(features)
        result = {keys.PROTOS: protos}
        if semantic is not None:
            result[keys.SEMANTIC] = semantic
        return result

    def _casting(self, *parts: nn.Module) -> AbstractContextManager[None]:
        """The scope in which ``parts`` run: their weights cast together, or as autocast casts."""
        return casting_weights(*parts) if self.casts_weights_together else nullcontext()

    def training_only_modules(self) -> Iterator[tuple[str, nn.Module]]:
        """The submodules an exported end-to-end model drops: the one-to-many head (its signal
        is for training and the NMS path) and the semantic branch."""
        yield "head.o2m", self.head.o2m
        if self.protos is not None:
            yield "protos.semantic", self.protos.semantic


__all__ = ["STRIDES", "TASKS", "YOLO26", "Task"]
