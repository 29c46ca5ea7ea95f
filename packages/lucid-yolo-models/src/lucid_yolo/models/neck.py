"""The YOLO26 neck: a path-aggregation network (PANet, Liu et al. 2018) over P3–P5.

A top-down pass brings P5's semantics to the finer levels (nearest 2× upsample, concatenate,
C3k2); a bottom-up pass brings the finer levels' localisation back up (stride-2 conv,
concatenate, C3k2). The last P5 fusion carries self-attention. Nearest upsampling is used on
purpose: its backward is deterministic, which the bitwise replay parity needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lucid_yolo.models.blocks import C3k2
from lucid_yolo.models.conv import ConvBnAct
from lucid_yolo.models.scales import Scale


class Neck(nn.Module):
    """Fuse (P3, P4, P5) into the head's (N3, N4, N5), same strides.

    Args:
        scale: model size.
        in_channels: channels of the backbone's P3, P4, P5.

    Attributes:
        out_channels: channels of N3, N4, N5.
    """

    def __init__(self, scale: Scale, in_channels: tuple[int, int, int]) -> None:
        super().__init__()
        ch = scale.channels
        n = scale.repeats(2)
        c3, c4, c5 = in_channels
        self.top_down4 = C3k2(c5 + c4, ch(512), n, deep=True)
        self.top_down3 = C3k2(ch(512) + c3, ch(256), n, deep=True)
        self.down3 = ConvBnAct(ch(256), ch(256), 3, 2)
        self.bottom_up4 = C3k2(ch(256) + ch(512), ch(512), n, deep=True)
        self.down4 = ConvBnAct(ch(512), ch(512), 3, 2)
        self.bottom_up5 = C3k2(ch(512) + c5, ch(1024), 1, deep=True, attention=True)
        self.out_channels = (ch(256), ch(512), ch(1024))

    def forward(self, p3: Tensor, p4: Tensor, p5: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Backbone maps → N3 ``(B, n3, H/8, W/8)``, N4 ``(B, n4, H/16, W/16)``,
        N5 ``(B, n5, H/32, W/32)``."""
        t4 = self.top_down4(torch.cat((F.interpolate(p5, scale_factor=2.0), p4), dim=1))
        n3 = self.top_down3(torch.cat((F.interpolate(t4, scale_factor=2.0), p3), dim=1))
        n4 = self.bottom_up4(torch.cat((self.down3(n3), t4), dim=1))
        n5 = self.bottom_up5(torch.cat((self.down4(n4), p5), dim=1))
        return n3, n4, n5


__all__ = ["Neck"]
