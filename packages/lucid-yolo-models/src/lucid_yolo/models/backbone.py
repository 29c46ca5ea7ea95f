"""The YOLO26 backbone: five stride-2 stages down to P5/32, then pooling and attention.

Nominal (nano-graph, ``width = 1``) widths per stage are 64, 128 → 256, 256 → 512, 512 → 512 and
1024 → 1024; :class:`~lucid_yolo.models.scales.Scale` turns them into real widths. The first two
C3k2 blocks use a narrow split (``expansion = 0.25``) because their maps are large and cheap
features suffice there.
"""

from __future__ import annotations

from torch import Tensor, nn

from lucid_yolo.models.attention import C2PSA
from lucid_yolo.models.blocks import SPPF, C3k2
from lucid_yolo.models.conv import ConvBnAct
from lucid_yolo.models.scales import Scale


class Backbone(nn.Module):
    """Image → features at strides 8, 16 and 32.

    Args:
        scale: model size.
        in_channels: image channels.

    Attributes:
        out_channels: channels of the returned (P3, P4, P5) maps.
    """

    def __init__(self, scale: Scale, in_channels: int = 3) -> None:
        super().__init__()
        ch = scale.channels
        rep = scale.repeats
        deep = scale.deep_blocks
        self.stem = nn.Sequential(
            ConvBnAct(in_channels, ch(64), 3, 2),  # P1/2
            ConvBnAct(ch(64), ch(128), 3, 2),  # P2/4
            C3k2(ch(128), ch(256), rep(2), deep=deep, expansion=0.25),
        )
        self.stage3 = nn.Sequential(
            ConvBnAct(ch(256), ch(256), 3, 2),
            C3k2(ch(256), ch(512), rep(2), deep=deep, expansion=0.25),
        )
        self.stage4 = nn.Sequential(
            ConvBnAct(ch(512), ch(512), 3, 2),
            C3k2(ch(512), ch(512), rep(2), deep=True),
        )
        self.stage5 = nn.Sequential(
            ConvBnAct(ch(512), ch(1024), 3, 2),
            C3k2(ch(1024), ch(1024), rep(2), deep=True),
            SPPF(ch(1024), ch(1024), 5, 3, shortcut=True),
            C2PSA(ch(1024), rep(2)),
        )
        self.out_channels = (ch(512), ch(512), ch(1024))

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(B, 3, H, W)`` → P3 ``(B, c3, H/8, W/8)``, P4 ``(B, c4, H/16, W/16)``,
        P5 ``(B, c5, H/32, W/32)``."""
        p3 = self.stage3(self.stem(images))
        p4 = self.stage4(p3)
        p5 = self.stage5(p4)
        return p3, p4, p5


__all__ = ["Backbone"]
