"""Mask prototypes for instance segmentation (YOLACT, Bolya et al. 2019) and the YOLO26
training-only semantic branch.

Prototypes are ``M`` image-wide maps at stride 4; an instance's mask is a per-instance linear
combination of them (coefficients from the head), cropped to its box. The prototype trunk sees
all three levels: P4 and P5 are projected to P3's width, upsampled (nearest) and added to P3
before a 3×3 fusion, so masks of large objects get P5's context. The semantic branch predicts
per-class logits at stride 8 from the same fused P3 map; it only adds a training signal and is
skipped in eval mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from lucid_yolo.models.conv import ConvBnAct
from lucid_yolo.models.weight_casts import CastConv2d


class Protos(nn.Module):
    """Multi-level features → ``M`` prototypes at stride 4 (+ semantic logits at stride 8).

    Args:
        in_channels: channels of the neck's N3, N4, N5.
        hidden: prototype trunk width.
        num_masks: prototypes ``M``.
        num_classes: semantic classes.
    """

    def __init__(
        self, in_channels: Sequence[int], hidden: int, num_masks: int, num_classes: int
    ) -> None:
        super().__init__()
        c3 = in_channels[0]
        self.refine = nn.ModuleList(ConvBnAct(c, c3) for c in in_channels[1:])
        self.fuse = ConvBnAct(c3, hidden, 3)
        self.cv1 = ConvBnAct(hidden, hidden, 3)
        self.upsample = nn.ConvTranspose2d(hidden, hidden, 2, 2, 0, bias=True)
        self.cv2 = ConvBnAct(hidden, hidden, 3)
        self.cv3 = ConvBnAct(hidden, num_masks)
        self.semantic = nn.Sequential(
            ConvBnAct(c3, hidden, 3),
            ConvBnAct(hidden, hidden, 3),
            CastConv2d(hidden, num_classes, 1),
        )

    def forward(self, features: Sequence[Tensor]) -> tuple[Tensor, Tensor | None]:
        """N3, N4, N5 → prototypes ``(B, M, H/4, W/4)`` and, in training mode, semantic logits
        ``(B, C, H/8, W/8)`` (``None`` in eval mode)."""
        p3 = features[0]
        fused = p3
        for refine, x in zip(self.refine, features[1:], strict=True):
            fused = fused + F.interpolate(refine(x), size=p3.shape[-2:])
        protos: Tensor = self.cv3(self.cv2(self.upsample(self.cv1(self.fuse(fused)))))
        semantic: Tensor | None = self.semantic(fused) if self.training else None
        return protos, semantic


__all__ = ["Protos"]
